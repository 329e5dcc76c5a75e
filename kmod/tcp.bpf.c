// SPDX-License-Identifier: GPL-2.0
/* tcp.bpf.c: every nettrail provider in one object (providers.md sections 2-9): tcp,
 * siftr and tcpdebug (issue 4), then ip, udp, skb drops and skb lifecycles (issue 5).
 * One object because the providers share the ring buffer, the loss counters, the
 * socket-owner map and the filters, and several share a tracepoint (net_dev_queue
 * serves siftr, tcpdebug, ip, udp and skb; kfree_skb serves tcpdebug and skb).
 *
 * Programs are named after their tracepoint. The loader (collector/bpf/loader.py,
 * PROGRAMS table) loads only the programs the chosen providers need; the
 * attribution programs (inet_sock_set_state, sock_send_length, sock_recv_length,
 * tcp_destroy_sock) are always loaded because every provider needs the owner map.
 * Settings live in `cfg` (struct nt_config, kmod/nettrail.h), written between open
 * and load, so disabled paths are removed by the verifier's dead-code elimination.
 *
 * The kernel records identity and raw values; units and names are the
 * translators' job (translators/tcp.py, siftr.py, tcpdebug.py, ip.py, udp.py, skb.py).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "nettrail.h"

char LICENSE[] SEC("license") = "GPL";

#define AF_INET 2
#define AF_INET6 10
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define MSG_OOB 1

/* arch/x86/include/asm/page_64_types.h: THREAD_SIZE without KASAN (16 KiB) */
#define NT_THREAD_SIZE 16384
#define PF_KTHREAD 0x00200000

/* enum tcp_state values (include/net/tcp_states.h) */
#define TCP_ESTABLISHED 1
#define TCP_SYN_SENT 2
#define TCP_SYN_RECV 3
#define TCP_FIN_WAIT1 4
#define TCP_FIN_WAIT2 5
#define TCP_CLOSE 7
#define TCP_CLOSE_WAIT 8
#define TCP_LAST_ACK 9
#define TCP_LISTEN 10
#define TCP_CLOSING 11
#define TCP_TIME_WAIT 6
#define TCP_NEW_SYN_RECV 12

/* Request and timewait mini-sockets end after sock_common. */
static __always_inline bool full_sock_state(__u8 st)
{
	return st != TCP_TIME_WAIT && st != TCP_NEW_SYN_RECV;
}

/* FreeBSD PRU_* codes used at the debug-user point (providers.md 5) */
#define PRU_LISTEN 3
#define PRU_CONNECT 4
#define PRU_DETACH 1
#define PRU_SHUTDOWN 7
#define PRU_RCVD 8
#define PRU_SEND 9
#define PRU_RCVOOB 13
#define PRU_SENDOOB 14
#define PRU_NONE 0xff

const volatile struct nt_config cfg = {};

extern unsigned int CONFIG_HZ __kconfig __weak;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 * 1024 * 1024); /* the loader may resize it before load */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nt_counters);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct nt_owner);
} owners SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct nt_listen_key);
	__type(value, struct nt_owner);
} listeners SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct nt_flow);
} flows SEC(".maps");

/* SIFTR flows' counters, one 64-byte slot per flow at its cookie's low bits: the
 * per-packet path's one cache line (an array lookup is inlined; a hash lookup is a call,
 * a hash, a bucket and an element over two lines). Cookies are handed out in sequence
 * (per CPU, in batches), so live flows rarely share a slot; a flow that finds its slot
 * taken is counted in `flows` instead. The collector reads the slots through mmap. */
#define NT_FLOW_SLOTS 32768
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NT_FLOW_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE); /* and so page-aligned: a slot is a cache line */
	__type(key, __u32);
	__type(value, struct nt_flow);
} flow_slots SEC(".maps");

/* SIFTR flows the filters rejected (see flow_admit): cookie -> 1 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u8);
} flows_out SEC(".maps");

/* The owner map's version: bumped on every change to it, so a hint below is trusted
 * only while no owner changed anywhere. */
__u64 owner_epoch = 0;

/* Per CPU, in slots by socket address: the last TCP socket of that slot a send/recv
 * found its caller owning, and owner_epoch then. The same thread on the same socket
 * with nothing changed since is the steady state of every busy connection; the hint
 * answers it without the owner-map lookup (a hash, its bucket and its element: cache
 * misses after each bulk copy to or from user space). Slots, not one
 * entry: both ends of a loopback connection often share a CPU and would evict each
 * other's hint on every call. */
#define NT_OWNER_HINTS 64
struct nt_owner_hint {
	__u64 sk;
	__u64 pid_tgid;
	__u64 epoch;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NT_OWNER_HINTS);
	__type(key, __u32);
	__type(value, struct nt_owner_hint);
} owner_hints SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct nt_drop_key);
	__type(value, __u64);
} drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nt_drop_budget);
} drop_budget SEC(".maps");

/* UDP senders by (netns, local port): a datagram dropped at the receiver has no
 * socket, but its source port names the sending socket on this host. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct nt_listen_key);
	__type(value, struct nt_owner);
} port_owners SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384); /* the collector may resize it before load (--ip-flows-max) */
	__type(key, struct nt_ip_flow_key);
	__type(value, struct nt_ip_flow);
} ip_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct nt_udp_flow_key);
	__type(value, struct nt_udp_flow);
} udp_flows SEC(".maps");

/* skb lifecycles: identity by address (providers.md 9.2) */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct nt_skb_id);
} skbs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u32);
} skb_gens SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} skb_uids SEC(".maps");

/* inferred consumes (no tracepoint where TCP/UDP free a read buffer): per-task reads
 * awaiting their recvmsg's sock_recv_length, and per-port UDP arrival queues */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct nt_skb_reads);
} skb_reads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nt_skb_reads);
} skb_reads_zero SEC(".maps"); /* never written: the zero value new entries copy */

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct nt_udp_rxq_key);
	__type(value, struct nt_udp_rxq_val);
} udp_rxq SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct nt_udp_rxq_key);
	__type(value, struct nt_udp_rxq_ends);
} udp_rxq_ends SEC(".maps");

/* ---- context, identity, attribution ------------------------------------ */

/* Task or softirq context? preempt_count is a per-CPU variable that is not in
 * kallsyms without CONFIG_KALLSYMS_ALL, so it cannot be read as a typed ksym.
 * Instead: x86-64 runs softirqs on the per-CPU IRQ stack (do_softirq_own_stack,
 * CONFIG_HAVE_SOFTIRQ_ON_OWN_STACK), and a tp_btf program's ctx is the argument
 * array bpf_trace_runN() keeps on the kernel stack in use. (The program's own
 * frame is no guide: since 6.14 tracing programs may run on a private per-CPU
 * stack.) So ctx outside the task's stack means softirq (or hardirq). ksoftirqd
 * runs softirqs on its own task stack: caught by name. An interrupt that hits
 * user mode does not switch stacks (the task stack is empty), and irq_exit runs
 * the pending softirqs right there, on the task stack: that task entered the
 * kernel by an interrupt, not a system call, so its entry frame's orig_ax is -1
 * (a system call keeps its number there, >= 0). Timer-fired retransmissions
 * that interrupt a user process are softirq by that test. */
static __always_inline bool in_task(void *ctx)
{
	struct task_struct *t = bpf_get_current_task_btf();
	__u64 base = (__u64)t->stack; /* direct loads: current is a trusted BTF pointer */
	void *args = ctx;
	__u64 here = 0;
	char comm[10];

	/* copy the address out as a plain number (the verifier forbids math on ctx) */
	bpf_probe_read_kernel(&here, sizeof(here), &args);
	if (here - base >= NT_THREAD_SIZE)
		return false;
	if (!(t->flags & PF_KTHREAD)) {
		struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(t);

		return regs && (long)regs->orig_ax >= 0;
	}
	bpf_get_current_comm(comm, sizeof(comm));
	return !(comm[0] == 'k' && comm[1] == 's' && comm[2] == 'o' && comm[3] == 'f' && comm[4] == 't' &&
		 comm[5] == 'i' && comm[6] == 'r' && comm[7] == 'q' && comm[8] == 'd');
}

static __always_inline __u64 cookie_of(const struct sock *sk)
{
	return sk ? bpf_get_socket_cookie((void *)sk) : 0;
}

/* For pointers read from memory (skb->sk), which the socket helpers refuse: the
 * cookie as already assigned, 0 if nobody asked for it yet (the state-change and
 * tcp_probe programs ask for every TCP socket they see). */
static __always_inline __u64 cookie_read(const struct sock *sk)
{
	return sk ? BPF_CORE_READ(sk, __sk_common.skc_cookie.counter) : 0;
}

#define SOCK_STREAM 1

/* A full TCP socket (not a request or timewait mini-socket, which end after sock_common). */
static __always_inline bool full_tcp(const struct sock *sk)
{
	__u8 st;

	if (!sk)
		return false;
	st = sk->__sk_common.skc_state;
	if (!full_sock_state(st))
		return false;
	return sk->sk_protocol == IPPROTO_TCP && sk->sk_type == SOCK_STREAM;
}

static __always_inline void fill_flow(struct nt_header *h, const struct sock *sk)
{
	/* direct loads (no probe-read helper): sk is a BTF pointer in every caller */
	__u16 family = sk->__sk_common.skc_family;

	h->family = family;
	h->sport = sk->__sk_common.skc_num;
	if (!h->sport && full_sock_state(sk->__sk_common.skc_state))
		/* X -> CLOSE: inet_put_port() already zeroed inet_num; inet_sport keeps the port */
		h->sport = bpf_ntohs(BPF_CORE_READ((const struct inet_sock *)sk, inet_sport));
	h->dport = bpf_ntohs(sk->__sk_common.skc_dport);
	h->netns = sk->__sk_common.skc_net.net->ns.inum;
	if (family == AF_INET) {
		__u32 s = sk->__sk_common.skc_rcv_saddr;
		__u32 d = sk->__sk_common.skc_daddr;

		__builtin_memcpy(h->saddr, &s, 4);
		__builtin_memcpy(h->daddr, &d, 4);
	} else if (family == AF_INET6) {
		/* explicit size: BPF_CORE_READ_INTO would copy sizeof(*h->saddr), one byte */
		bpf_core_read(h->saddr, NT_ADDR_LEN, &sk->__sk_common.skc_v6_rcv_saddr);
		bpf_core_read(h->daddr, NT_ADDR_LEN, &sk->__sk_common.skc_v6_daddr);
	}
}

static __always_inline void owner_from_current(struct nt_owner *o)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 uid_gid = bpf_get_current_uid_gid();

	o->pid = (__u32)pid_tgid;
	o->tgid = pid_tgid >> 32;
	o->uid = (__u32)uid_gid;
	o->gid = uid_gid >> 32;
	o->cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(o->comm, sizeof(o->comm));
}

/* Task-context hooks record who uses the socket (last writer wins, section 9.3). */
static __always_inline void owner_note(__u64 cookie, const struct nt_owner *cur)
{
	struct nt_owner *old;
	struct nt_owner o;

	if (!cookie)
		return;
	old = bpf_map_lookup_elem(&owners, &cookie);
	if (old && old->pid == cur->pid && old->tgid == cur->tgid)
		return; /* the common case on a busy socket: nothing changed */
	o = *cur;
	o.first_ns = old ? old->first_ns : bpf_ktime_get_ns();
	bpf_map_update_elem(&owners, &cookie, &o, BPF_ANY);
	__sync_fetch_and_add(&owner_epoch, 1);
}

static __always_inline void copy_owner(struct nt_header *h, const struct nt_owner *o, __u8 how)
{
	h->pid = o->pid;
	h->tgid = o->tgid;
	h->uid = o->uid;
	h->gid = o->gid;
	h->cgroup_id = o->cgroup_id;
	__builtin_memcpy(h->comm, o->comm, sizeof(h->comm));
	h->attribution = how;
}

/* How a hook may attribute (section 9.3), in the `how` argument of attribute():
 * NT_HOOK_TASK: the event fired in task context (in_task) — this decides `ctx`.
 * NT_HOOK_USER: a hook that runs in the socket user's system call by construction
 *   (connect/listen/close state transitions): current is trusted if it is of the
 *   owner's process (tgid) or the socket has no owner yet.
 * NT_HOOK_CALL: send/recv on the socket: current is its user, whoever owned it
 *   before (last writer wins: sockets passed between processes follow their user).
 * Every other hook takes the owner map by cookie: a "task" there may be another
 * process whose system call runs the peer's receive path (loopback), or a timer
 * that interrupted whatever ran. Only a socket nobody owns yet (opened before the
 * collector started) or no socket at all falls back to current in task context. */
#define NT_HOOK_TASK 1
#define NT_HOOK_USER 2
#define NT_HOOK_CALL 4

static __always_inline __u8 hook_user(bool task)
{
	return task ? (NT_HOOK_TASK | NT_HOOK_USER) : 0;
}

static __always_inline __u8 hook_call(bool task)
{
	return task ? (NT_HOOK_TASK | NT_HOOK_USER | NT_HOOK_CALL) : 0;
}

/* Fill ts, cpu, ctx and attribution. `ctx` says where the event fired; the
 * attribution source is current only where current is the socket's user,
 * otherwise the owner map (see NT_HOOK_*). */
static __always_inline void attribute(struct nt_header *h, __u16 type, __u8 how)
{
	struct nt_owner *o = NULL;
	struct nt_owner cur = {};

	h->type = type;
	h->ts_ns = bpf_ktime_get_ns();
	h->cpu = bpf_get_smp_processor_id();
	h->ctx = (how & NT_HOOK_TASK) ? NT_CTX_TASK : NT_CTX_SOFTIRQ;
	if (h->cookie)
		o = bpf_map_lookup_elem(&owners, &h->cookie);
	if (how & NT_HOOK_TASK) {
		/* current's identity only where it is used: four helper calls per event otherwise */
		if (how & NT_HOOK_USER) {
			owner_from_current(&cur);
			if ((how & NT_HOOK_CALL) || !o || o->tgid == cur.tgid) {
				copy_owner(h, &cur, NT_ATTR_CURRENT);
				owner_note(h->cookie, &cur);
				return;
			}
		} else if (!o) {
			owner_from_current(&cur);
			copy_owner(h, &cur, NT_ATTR_CURRENT); /* best guess; not recorded as the owner */
			return;
		}
	}
	if (o)
		copy_owner(h, o, NT_ATTR_OWNER);
}

/* Word compares: the header keeps addresses 4-byte aligned. */
static __always_inline bool addr_match(const __u8 *a)
{
	const __u32 *x = (const __u32 *)a;
	const volatile __u32 *y = (const volatile __u32 *)cfg.addr;

	if (cfg.addr_family == AF_INET)
		return x[0] == y[0];
	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3];
}

static __always_inline bool pass(const struct nt_header *h)
{
	if (cfg.tgid && h->tgid != cfg.tgid)
		return false;
	if (cfg.exclude_tgid && h->tgid == cfg.exclude_tgid && h->attribution != NT_ATTR_NONE)
		return false;
	if (cfg.cgroup_id && h->cgroup_id != cfg.cgroup_id)
		return false;
	if (cfg.netns && h->netns != cfg.netns)
		return false;
	if (cfg.port && h->sport != cfg.port && h->dport != cfg.port)
		return false;
	if (cfg.addr_family) {
		if (h->family != cfg.addr_family)
			return false;
		if (!addr_match(h->saddr) && !addr_match(h->daddr))
			return false;
	}
	return true;
}

/* Reserve a ring-buffer slot; count the attempt and any failure per CPU and type. */
static __always_inline struct nt_event *reserve(__u16 type)
{
	__u32 zero = 0;
	struct nt_counters *c = bpf_map_lookup_elem(&counters, &zero);
	struct nt_event *e;

	if (c)
		__sync_fetch_and_add(&c->generated[type & (NT_EV_MAX - 1)], 1);
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e && c)
		__sync_fetch_and_add(&c->lost[type & (NT_EV_MAX - 1)], 1);
	return e;
}

/* A ring slot: the event behind the ring's 8-byte record header, 8-byte aligned. */
#define NT_SLOT ((sizeof(struct nt_event) + 8 + 7) & ~7UL)

/* Publish a slot, waking the reader only when the ring crosses an eighth full (and
 * then every 1024th record while it stays above, should that crossing be missed).
 * A wake-up is an irq_work self-interrupt, an exit to the hypervisor in a VM that
 * costs microseconds: paid per event, as the default (wake whenever the reader has
 * caught up) does at low rates, it was most of what ppl=32 cost the traffic; paid on
 * every event above a threshold it made ppl=1 ten times dearer. Otherwise the
 * reader finds the events on its next timed poll (100 ms, collector/bpf/source.py). */
static __always_inline void submit(void *e)
{
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	__u64 eighth = bpf_ringbuf_query(&events, BPF_RB_RING_SIZE) / 8;
	__u64 flags = BPF_RB_NO_WAKEUP;

	if (avail >= eighth &&
	    (avail - NT_SLOT < eighth || (bpf_ringbuf_query(&events, BPF_RB_PROD_POS) / NT_SLOT) % 1024 == 0))
		flags = BPF_RB_FORCE_WAKEUP;
	bpf_ringbuf_submit(e, flags);
}

/* Header on the stack, filters, then the slot: filtered events cost no ring space. */
static __always_inline struct nt_event *start(struct nt_header *h, const struct sock *sk, __u16 type, __u8 task)
{
	struct nt_event *e;

	h->cookie = cookie_of(sk);
	if (sk)
		fill_flow(h, sk);
	attribute(h, type, task);
	if (!pass(h))
		return NULL;
	e = reserve(type);
	if (e)
		__builtin_memcpy(&e->hdr, h, sizeof(*h));
	return e;
}

/* ---- control-block snapshot (siftr, tcpdebug) --------------------------- */

extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

/* Direct loads (not a probe-read helper call per field: the snapshot is the per-sample
 * cost of siftr and tcpdebug) through a read-only cast, which takes any socket pointer
 * (skb->sk included). The callers pass full TCP sockets only. */
static __always_inline void snapshot(struct nt_tcp_snapshot *s, const struct sock *sk)
{
	const struct tcp_sock *tp = bpf_rdonly_cast(sk, bpf_core_type_id_kernel(struct tcp_sock));
	const struct inet_connection_sock *icsk = &tp->inet_conn;
	__u8 flags = NT_SNAP_VALID;

	s->bytes_acked = tp->bytes_acked;
	s->bytes_received = tp->bytes_received;
	s->snd_cwnd = tp->snd_cwnd;
	s->snd_ssthresh = tp->snd_ssthresh;
	s->snd_wnd = tp->snd_wnd;
	s->rcv_wnd = tp->rcv_wnd;
	s->srtt_us = tp->srtt_us;
	s->mdev_us = tp->mdev_us;
	s->rto_us = CONFIG_HZ ? icsk->icsk_rto * (1000000 / CONFIG_HZ) : 0;
	s->mss_cache = tp->mss_cache;
	s->snd_una = tp->snd_una;
	s->snd_nxt = tp->snd_nxt;
	s->rcv_nxt = tp->rcv_nxt;
	s->rcv_wup = tp->rcv_wup;
	s->snd_wl1 = tp->snd_wl1;
	s->write_seq = tp->write_seq;
	s->copied_seq = tp->copied_seq;
	s->sndbuf = tp->inet_conn.icsk_inet.sk.sk_sndbuf;
	s->rcvbuf = tp->inet_conn.icsk_inet.sk.sk_rcvbuf;
	s->packets_out = tp->packets_out;
	s->sacked_out = tp->sacked_out;
	s->lost_out = tp->lost_out;
	s->retrans_out = tp->retrans_out;
	s->total_retrans = tp->total_retrans;
	s->delivered = tp->delivered;
	s->app_limited = tp->app_limited;
	s->ts_recent = tp->rx_opt.ts_recent;
	s->rxhash = tp->inet_conn.icsk_inet.sk.__sk_common.skc_rxhash;
	s->state = tp->inet_conn.icsk_inet.sk.__sk_common.skc_state;
	s->ca_state = BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state);
	s->retransmits = icsk->icsk_retransmits;
	s->backoff = icsk->icsk_backoff;
	s->snd_wscale = BPF_CORE_READ_BITFIELD(tp, rx_opt.snd_wscale);
	s->rcv_wscale = BPF_CORE_READ_BITFIELD(tp, rx_opt.rcv_wscale);
	if (BPF_CORE_READ_BITFIELD(tp, rx_opt.sack_ok))
		flags |= NT_SNAP_SACK;
	if (BPF_CORE_READ_BITFIELD(tp, rx_opt.wscale_ok))
		flags |= NT_SNAP_WSCALE;
	if (BPF_CORE_READ_BITFIELD(tp, rx_opt.tstamp_ok))
		flags |= NT_SNAP_TSTAMP;
	if (BPF_CORE_READ_BITFIELD(tp, nonagle) & 1)
		flags |= NT_SNAP_NODELAY;
	if (BPF_CORE_READ_BITFIELD(tp, syn_fastopen) || tp->fastopen_rsk)
		flags |= NT_SNAP_FASTOPEN;
	if (tp->ecn_flags & 1)
		flags |= NT_SNAP_ECN;
	s->flags = flags;
	BPF_CORE_READ_STR_INTO(&s->cc_algo, icsk, icsk_ca_ops, name);
}

/* The TCP header of an skb, from the transport offset (output, drop) or skb->data (input). */
struct seg {
	__u32 seq;
	__u32 ack;
	__u32 payload;
	__u16 win;
	__u8 flags;
	__u8 ok;
};

static __always_inline void read_tcphdr(struct seg *g, const struct tcphdr *th, __u32 hdr_to_end)
{
	struct tcphdr t;
	__u32 doff;

	if (bpf_probe_read_kernel(&t, sizeof(t), th))
		return;
	doff = t.doff * 4;
	g->seq = bpf_ntohl(t.seq);
	g->ack = bpf_ntohl(t.ack_seq);
	g->win = bpf_ntohs(t.window);
	g->flags = ((__u8 *)&t)[13];
	g->payload = hdr_to_end > doff ? hdr_to_end - doff : 0;
	g->ok = 1;
}

/* Where a segment's TCP header is (NULL: nowhere) and how many bytes run from it to the
 * skb's end: the per-packet path needs only the payload length, a sample the header. */
struct seg_ref {
	const struct tcphdr *th;
	__u32 hdr_to_end;
};

static __always_inline void read_seg(struct seg *g, const struct seg_ref *r)
{
	if (r->th)
		read_tcphdr(g, r->th, r->hdr_to_end);
}

/* The payload length from the header's data offset: one direct load, no helper call. */
static __always_inline __u32 seg_payload(const struct seg_ref *r)
{
	const __u8 *t;
	__u32 doff;

	if (!r->th)
		return 0;
	t = bpf_rdonly_cast(r->th, bpf_core_type_id_kernel(struct tcphdr));
	doff = (t[12] >> 4) * 4;
	return r->hdr_to_end > doff ? r->hdr_to_end - doff : 0;
}

/* Output side: header at head + transport_header; payload from skb->len. */
static __always_inline struct seg_ref seg_ref_at_transport(const struct sk_buff *skb)
{
	unsigned char *head = skb->head;
	__u16 th_off = skb->transport_header;
	__u32 data_off = skb->data - head;
	struct seg_ref r = {};

	if (th_off == 0xffff || th_off < data_off)
		return r;
	r.th = (const struct tcphdr *)(head + th_off);
	r.hdr_to_end = skb->len - (th_off - data_off);
	return r;
}

static __always_inline void seg_at_transport(struct seg *g, const struct sk_buff *skb)
{
	struct seg_ref r = seg_ref_at_transport(skb);

	read_seg(g, &r);
}

/* ---- siftr flow state ---------------------------------------------------- */

static __always_inline struct nt_flow *flow_slot(__u64 cookie)
{
	__u32 i = cookie & (NT_FLOW_SLOTS - 1);

	return bpf_map_lookup_elem(&flow_slots, &i);
}

static __always_inline struct nt_flow *flow_find(__u64 cookie)
{
	struct nt_flow *f = flow_slot(cookie);

	if (f && f->flow_cookie == cookie)
		return f;
	return bpf_map_lookup_elem(&flows, &cookie);
}

/* The per-packet cost is what tracing every segment costs the traffic (issue 4 wants
 * <= 3% at ppl=32), so a packet that is counted but not sampled does only this: its
 * flow's slot, the counters, and the sampling decision. The filters and the
 * attribution run once per flow, when it is first seen (and again for each sample):
 * a flow the filters reject goes to `flows_out` and is not counted. The verdict is
 * kept only once the flow has an owner; until then a process filter cannot judge it. */
static __noinline int flow_admit(const struct sock *sk, __u64 cookie, void *ctx)
{
	struct nt_header h = { .cookie = cookie };
	struct nt_flow init = {}, *slot;
	__u8 no = 1;

	if (bpf_map_lookup_elem(&flows_out, &cookie))
		return 0;
	fill_flow(&h, sk);
	attribute(&h, NT_EV_SIFTR, in_task(ctx));
	if (!pass(&h)) {
		if (h.attribution != NT_ATTR_NONE || !(cfg.tgid || cfg.cgroup_id))
			bpf_map_update_elem(&flows_out, &cookie, &no, BPF_ANY);
		return 0;
	}
	init.flow_cookie = cookie;
	init.first_ns = init.last_ns = h.ts_ns;
	slot = flow_slot(cookie);
	if (slot && __sync_val_compare_and_swap(&slot->flow_cookie, 0, cookie) == 0) {
		__builtin_memcpy(slot, &init, sizeof(init)); /* the slot's previous flow left its counts */
		return 1;
	}
	bpf_map_update_elem(&flows, &cookie, &init, BPF_NOEXIST);
	return 1;
}

/* Count the packet in the flow's exact counters; true if it is the flow's ppl-th.
 * Plain increments, not atomics: a socket's segments are handled under its lock
 * (tcp_probe in tcp_rcv_established, net_dev_queue in tcp_transmit_skb), so one
 * flow's counts never race. No clock read: last_ns is the last sample's time. */
static __always_inline bool flow_count(struct nt_flow *f, bool out, __u32 payload)
{
	__u64 seen = f->packets_in + f->packets_out;

	if (out) {
		f->packets_out++;
		f->bytes_out += payload;
	} else {
		f->packets_in++;
		f->bytes_in += payload;
	}
	if (seen % cfg.ppl)
		return false;
	f->samples++;
	return true;
}

/* The sampled packet's record, out of line: the per-packet path stays short and its
 * code compact (on loopback every other segment copy evicts the caches, so what a
 * program costs is mostly the cache lines it touches, its own code included). */
static __noinline void siftr_emit(const struct sock *sk, struct nt_flow *f, const struct seg_ref *r, __u8 dir,
				  void *ctx)
{
	struct nt_header h = {};
	struct nt_event *e;
	struct seg g = {};

	h.cookie = sk->__sk_common.skc_cookie.counter;
	fill_flow(&h, sk);
	attribute(&h, NT_EV_SIFTR, in_task(ctx));
	f->last_ns = h.ts_ns;
	if (!pass(&h))
		return; /* the owner changed since the flow was admitted */
	e = reserve(NT_EV_SIFTR);
	if (!e)
		return;
	__builtin_memcpy(&e->hdr, &h, sizeof(h));
	snapshot(&e->siftr.snap, sk);
	read_seg(&g, r);
	e->siftr.th_seq = g.seq;
	e->siftr.th_ack = g.ack;
	e->siftr.data_sz = g.payload;
	e->siftr.direction = dir;
	submit(e);
}

static __always_inline void siftr_packet(const struct sock *sk, __u64 cookie, const struct seg_ref *r, __u8 dir,
					 void *ctx)
{
	struct nt_flow *f = flow_find(cookie);

	if (!f && (!flow_admit(sk, cookie, ctx) || !(f = flow_find(cookie))))
		return;
	if (flow_count(f, dir == 1, seg_payload(r)))
		siftr_emit(sk, f, r, dir, ctx);
}

/* ---- tcpdebug ----------------------------------------------------------- */

static __always_inline void flow_from_segment(struct nt_header *h, const struct sk_buff *skb);
static __always_inline __u8 flow_from_packet(struct nt_header *h, const struct sk_buff *skb, int reverse);
static __always_inline void skb_first(const struct sk_buff *skb, const struct sock *sk, bool rx, bool task);
static __always_inline void udp_packet(const struct sk_buff *skb, const struct sock *sk, __u8 dir, bool task);
static __always_inline void udp_rxq_push(const struct sk_buff *skb);

/* rx_skb: the segment to take the 4-tuple from when there is no socket (drop). */
static __always_inline void debug_point(const struct sock *sk, __u64 cookie, const struct seg *g, __u8 dir,
					 __u8 prureq, __u8 approx, __u32 reason, const struct sk_buff *rx_skb, __u8 task)
{
	struct nt_header h = {};
	struct nt_event *e;

	h.cookie = cookie;
	if (sk)
		fill_flow(&h, sk);
	else if (rx_skb)
		flow_from_segment(&h, rx_skb);
	attribute(&h, NT_EV_DEBUG, task);
	if (!pass(&h) || !(e = reserve(NT_EV_DEBUG)))
		return;
	__builtin_memcpy(&e->hdr, &h, sizeof(h));
	if (full_tcp(sk))
		snapshot(&e->debug.snap, sk);
	else
		__builtin_memset(&e->debug.snap, 0, sizeof(e->debug.snap));
	e->debug.th_seq = g ? g->seq : 0;
	e->debug.th_ack = g ? g->ack : 0;
	e->debug.payload_len = g ? g->payload : 0;
	e->debug.th_win = g ? g->win : 0;
	e->debug.th_flags = g ? g->flags : 0;
	e->debug.has_seg = g ? g->ok : 0;
	e->debug.drop_reason = reason;
	e->debug.direction = dir;
	e->debug.prureq = prureq;
	e->debug.approx = approx;
	e->debug._pad_tail = 0;
	submit(e);
}

/* ---- tcp provider programs ---------------------------------------------- */

static __always_inline void listener_note(const struct sock *sk, __u32 netns, __u16 port, bool add)
{
	struct nt_listen_key k = { .netns = netns, .port = port };
	struct nt_owner o = {};

	if (!add) {
		bpf_map_delete_elem(&listeners, &k);
		return;
	}
	owner_from_current(&o);
	o.first_ns = bpf_ktime_get_ns();
	bpf_map_update_elem(&listeners, &k, &o, BPF_ANY);
}

/* A passive child is born in softirq: it inherits its listener's owner. */
static __always_inline void child_inherit(__u64 cookie, __u32 netns, __u16 port)
{
	struct nt_listen_key k = { .netns = netns, .port = port };
	struct nt_owner *l = bpf_map_lookup_elem(&listeners, &k);
	struct nt_owner o;

	if (!l || !cookie)
		return;
	o = *l;
	o.first_ns = bpf_ktime_get_ns();
	bpf_map_update_elem(&owners, &cookie, &o, BPF_NOEXIST);
	__sync_fetch_and_add(&owner_epoch, 1);
}

/* Transitions that only a system call of the socket's user makes (connect, listen,
 * close/shutdown); ambiguous ones (X -> CLOSE after a reset or a timeout) are not. */
static __always_inline bool user_transition(int oldstate, int newstate)
{
	return (oldstate == TCP_CLOSE && (newstate == TCP_SYN_SENT || newstate == TCP_LISTEN)) ||
	       (oldstate == TCP_ESTABLISHED && newstate == TCP_FIN_WAIT1) ||
	       (oldstate == TCP_CLOSE_WAIT && newstate == TCP_LAST_ACK) ||
	       (oldstate == TCP_LISTEN && newstate == TCP_CLOSE);
}

static __always_inline __u8 user_request(int oldstate, int newstate, __u8 *approx)
{
	if (oldstate == TCP_CLOSE && newstate == TCP_LISTEN)
		return PRU_LISTEN;
	if (oldstate == TCP_CLOSE && newstate == TCP_SYN_SENT)
		return PRU_CONNECT;
	if ((oldstate == TCP_ESTABLISHED && newstate == TCP_FIN_WAIT1) ||
	    (oldstate == TCP_CLOSE_WAIT && newstate == TCP_LAST_ACK)) {
		*approx = 1; /* close() and shutdown() look the same here */
		return PRU_SHUTDOWN;
	}
	return PRU_NONE;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(inet_sock_set_state, const struct sock *sk, const int oldstate, const int newstate)
{
	struct nt_header h = {};
	struct nt_event *e;
	bool task = in_task(ctx);
	__u8 how;

	if (BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP)
		return 0;
	h.cookie = cookie_of(sk);
	fill_flow(&h, sk);
	if (oldstate == TCP_LISTEN && newstate == TCP_SYN_RECV)
		child_inherit(h.cookie, h.netns, h.sport);
	how = user_transition(oldstate, newstate) ? hook_user(task) : task;
	attribute(&h, NT_EV_STATE, how);
	if (oldstate == TCP_CLOSE && newstate == TCP_LISTEN && task)
		listener_note(sk, h.netns, h.sport, true);
	else if (oldstate == TCP_LISTEN && newstate == TCP_CLOSE)
		listener_note(sk, h.netns, h.sport, false);
	if (!pass(&h))
		return 0;
	if (cfg.providers & NT_PROV_TCPDEBUG) {
		__u8 approx = 0;
		__u8 req = user_request(oldstate, newstate, &approx);

		if (req != PRU_NONE && task)
			debug_point(sk, h.cookie, NULL, NT_TA_USER, req, approx, 0, NULL, how);
	}
	if (!(cfg.providers & NT_PROV_TCP))
		return 0;
	e = reserve(NT_EV_STATE);
	if (!e)
		return 0;
	__builtin_memcpy(&e->hdr, &h, sizeof(h));
	e->state.sk_err = BPF_CORE_READ(sk, sk_err);
	e->state.oldstate = oldstate;
	e->state.newstate = newstate;
	e->state._pad[0] = e->state._pad[1] = 0;
	submit(e);
	return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(tcp_retransmit_skb, const struct sock *sk, const struct sk_buff *skb, int err)
{
	const struct tcp_skb_cb *cb = (const struct tcp_skb_cb *)&skb->cb[0];
	struct nt_header h = {};
	struct nt_event *e = start(&h, sk, NT_EV_RETRANSMIT, in_task(ctx));

	if (!e)
		return 0;
	__builtin_memset(&e->retransmit, 0, sizeof(e->retransmit));
	e->retransmit.seq = BPF_CORE_READ(cb, seq);
	e->retransmit.end_seq = BPF_CORE_READ(cb, end_seq);
	e->retransmit.segs = BPF_CORE_READ(cb, tcp_gso_segs);
	e->retransmit.tcp_flags = BPF_CORE_READ(cb, tcp_flags);
	e->retransmit.err = err;
	e->retransmit.state = BPF_CORE_READ(sk, __sk_common.skc_state);
	e->retransmit.ca_state = BPF_CORE_READ_BITFIELD_PROBED((const struct inet_connection_sock *)sk, icsk_ca_state);
	submit(e);
	return 0;
}

SEC("tp_btf/tcp_retransmit_synack")
int BPF_PROG(tcp_retransmit_synack, const struct sock *sk, const struct request_sock *req)
{
	struct nt_header h = {};
	struct nt_event *e = start(&h, sk, NT_EV_RETRANSMIT, in_task(ctx));

	if (!e)
		return 0;
	/* The listener's 4-tuple has no peer: take the peer from the request. */
	e->hdr.dport = bpf_ntohs(BPF_CORE_READ(req, __req_common.skc_dport));
	if (e->hdr.family == AF_INET) {
		__u32 d = BPF_CORE_READ(req, __req_common.skc_daddr);
		__u32 s = BPF_CORE_READ(req, __req_common.skc_rcv_saddr);

		__builtin_memcpy(e->hdr.daddr, &d, 4);
		__builtin_memcpy(e->hdr.saddr, &s, 4);
	} else {
		bpf_core_read(e->hdr.daddr, NT_ADDR_LEN, &req->__req_common.skc_v6_daddr);
		bpf_core_read(e->hdr.saddr, NT_ADDR_LEN, &req->__req_common.skc_v6_rcv_saddr);
	}
	__builtin_memset(&e->retransmit, 0, sizeof(e->retransmit));
	e->retransmit.segs = 1;
	e->retransmit.tcp_flags = 0x12; /* SYN|ACK */
	e->retransmit.state = TCP_SYN_RECV;
	e->retransmit.synack = 1;
	submit(e);
	return 0;
}

/* The 4-tuple of a packet from its headers; returns the IP protocol (0 unknown).
 * reverse: local side first for a received segment (its destination is local). */
static __always_inline __u8 flow_from_packet(struct nt_header *h, const struct sk_buff *skb, int reverse)
{
	unsigned char *head = BPF_CORE_READ(skb, head);
	__u16 nh = BPF_CORE_READ(skb, network_header);
	__u16 th = BPF_CORE_READ(skb, transport_header);

	if (reverse == 2) { /* receive hooks: the network header is at skb->data */
		nh = BPF_CORE_READ(skb, data) - head;
		th = 0xffff;
		reverse = false;
	}
	__u16 ports[2];
	__u8 ver, proto = 0;

	h->netns = BPF_CORE_READ(skb, dev, nd_net.net, ns.inum);
	if (nh == 0xffff || bpf_probe_read_kernel(&ver, 1, head + nh))
		return 0;
	ver >>= 4;
	if (ver == 4) {
		struct iphdr ip;

		if (bpf_probe_read_kernel(&ip, sizeof(ip), head + nh))
			return 0;
		h->family = AF_INET;
		__builtin_memcpy(reverse ? h->daddr : h->saddr, &ip.saddr, 4);
		__builtin_memcpy(reverse ? h->saddr : h->daddr, &ip.daddr, 4);
		proto = ip.protocol;
		if (th == 0xffff || th <= nh)
			th = nh + ip.ihl * 4; /* not set yet on this path */
	} else if (ver == 6) {
		struct ipv6hdr ip6;

		if (bpf_probe_read_kernel(&ip6, sizeof(ip6), head + nh))
			return 0;
		h->family = AF_INET6;
		__builtin_memcpy(reverse ? h->daddr : h->saddr, &ip6.saddr, 16);
		__builtin_memcpy(reverse ? h->saddr : h->daddr, &ip6.daddr, 16);
		proto = ip6.nexthdr; /* extension headers are not walked */
		if (th == 0xffff || th <= nh)
			th = nh + sizeof(ip6);
	} else {
		return 0;
	}
	if ((proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_UDPLITE) &&
	    !bpf_probe_read_kernel(ports, sizeof(ports), head + th)) {
		h->sport = bpf_ntohs(ports[reverse ? 1 : 0]);
		h->dport = bpf_ntohs(ports[reverse ? 0 : 1]);
	}
	return proto;
}

static __always_inline void flow_from_segment(struct nt_header *h, const struct sk_buff *skb)
{
	flow_from_packet(h, skb, true);
}

SEC("tp_btf/tcp_send_reset")
int BPF_PROG(tcp_send_reset, const struct sock *sk, const struct sk_buff *skb, const enum sk_rst_reason reason)
{
	struct nt_header h = {};
	struct nt_event *e;
	bool task = in_task(ctx);

	h.cookie = cookie_of(sk);
	if (sk)
		fill_flow(&h, sk);
	else if (skb)
		flow_from_segment(&h, skb);
	attribute(&h, NT_EV_RESET, task);
	if (!pass(&h))
		return 0;
	e = reserve(NT_EV_RESET);
	if (!e)
		return 0;
	__builtin_memcpy(&e->hdr, &h, sizeof(h));
	e->reset.reason = reason;
	e->reset.state = sk ? BPF_CORE_READ(sk, __sk_common.skc_state) : 0;
	e->reset.sender = 0;
	e->reset.active = skb ? 0 : 1;
	e->reset.has_sock = sk ? 1 : 0;
	submit(e);
	return 0;
}

SEC("tp_btf/tcp_receive_reset")
int BPF_PROG(tcp_receive_reset, struct sock *sk)
{
	struct nt_header h = {};
	struct nt_event *e = start(&h, sk, NT_EV_RESET, in_task(ctx));

	if (!e)
		return 0;
	e->reset.reason = 0;
	e->reset.state = BPF_CORE_READ(sk, __sk_common.skc_state);
	e->reset.sender = 1;
	e->reset.active = 0;
	e->reset.has_sock = 1;
	submit(e);
	return 0;
}

SEC("tp_btf/tcp_cong_state_set")
int BPF_PROG(tcp_cong_state_set, struct sock *sk, const __u8 ca_state)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	struct nt_header h = {};
	struct nt_event *e = start(&h, sk, NT_EV_CONG, in_task(ctx));

	if (!e)
		return 0;
	/* fires before icsk_ca_state is assigned: the field still holds the old state */
	e->cong.old_ca_state = BPF_CORE_READ_BITFIELD_PROBED((const struct inet_connection_sock *)sk, icsk_ca_state);
	e->cong.new_ca_state = ca_state;
	e->cong.snd_cwnd = BPF_CORE_READ(tp, snd_cwnd);
	e->cong.snd_ssthresh = BPF_CORE_READ(tp, snd_ssthresh);
	e->cong.mss = BPF_CORE_READ(tp, mss_cache);
	e->cong._pad[0] = e->cong._pad[1] = 0;
	submit(e);
	return 0;
}

static __always_inline void emit_flow_final(const struct nt_header *h, const struct nt_flow *f)
{
	struct nt_event *e = reserve(NT_EV_FLOW);

	if (!e)
		return;
	__builtin_memcpy(&e->hdr, h, sizeof(*h));
	e->hdr.type = NT_EV_FLOW;
	__builtin_memcpy(&e->flow, f, sizeof(*f));
	submit(e);
}

SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(tcp_destroy_sock, struct sock *sk)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	struct nt_header h = {};
	struct nt_event *e;
	struct nt_flow *f, *slot = NULL;
	struct nt_owner *o;
	bool task = in_task(ctx);

	h.cookie = cookie_of(sk);
	fill_flow(&h, sk);
	attribute(&h, NT_EV_DESTROY, task);
	o = bpf_map_lookup_elem(&owners, &h.cookie);
	if (cfg.providers & NT_PROV_SIFTR) {
		slot = flow_slot(h.cookie);
		if (slot && slot->flow_cookie != h.cookie)
			slot = NULL;
	}
	if (pass(&h)) {
		if (cfg.providers & NT_PROV_SIFTR) {
			f = slot ?: bpf_map_lookup_elem(&flows, &h.cookie);
			if (f)
				emit_flow_final(&h, f);
		}
		if (cfg.providers & NT_PROV_TCPDEBUG)
			debug_point(sk, h.cookie, NULL, NT_TA_USER, PRU_DETACH, 0, 0, NULL, task);
		if ((cfg.providers & NT_PROV_TCP) && (e = reserve(NT_EV_DESTROY))) {
			__builtin_memcpy(&e->hdr, &h, sizeof(h));
			e->destroy.bytes_acked = BPF_CORE_READ(tp, bytes_acked);
			e->destroy.bytes_received = BPF_CORE_READ(tp, bytes_received);
			e->destroy.first_ns = o ? o->first_ns : 0;
			e->destroy.segs_in = BPF_CORE_READ(tp, segs_in);
			e->destroy.segs_out = BPF_CORE_READ(tp, segs_out);
			e->destroy.total_retrans = BPF_CORE_READ(tp, total_retrans);
			e->destroy.state = BPF_CORE_READ(sk, __sk_common.skc_state);
			e->destroy._pad[0] = e->destroy._pad[1] = e->destroy._pad[2] = 0;
			submit(e);
		}
	}
	if (slot) /* after the final counts were copied out: free for the next flow */
		__sync_val_compare_and_swap(&slot->flow_cookie, h.cookie, 0);
	else
		bpf_map_delete_elem(&flows, &h.cookie);
	bpf_map_delete_elem(&flows_out, &h.cookie);
	bpf_map_delete_elem(&owners, &h.cookie);
	__sync_fetch_and_add(&owner_epoch, 1); /* also retires hints naming this socket's address */
	return 0;
}

static __always_inline void port_owner_note(const struct sock *sk)
{
	struct nt_listen_key k = {};
	struct nt_owner cur = {};
	struct nt_owner *old;

	k.port = BPF_CORE_READ(sk, __sk_common.skc_num);
	k.netns = BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
	if (!k.port)
		return;
	owner_from_current(&cur);
	old = bpf_map_lookup_elem(&port_owners, &k);
	if (old && old->pid == cur.pid && old->tgid == cur.tgid)
		return;
	cur.first_ns = bpf_ktime_get_ns();
	bpf_map_update_elem(&port_owners, &k, &cur, BPF_ANY);
}

/* ---- ip provider ------------------------------------------------------------ */

/* Count the packet in its ip_flows entry (exact, whatever the sampling); true if it is
 * the entry's ip_sample-th packet, whose full ip record is then emitted. */
static __always_inline bool ip_flow_count(const struct nt_header *h, const struct sk_buff *skb, unsigned char *nh,
					  __u8 ver, __u8 proto, __u8 dir)
{
	struct nt_ip_flow_key k = {};
	struct nt_ip_flow *f;
	__u32 zero = 0;
	__u64 seen, bytes;

	k.netns = h->netns;
	k.if_index = skb->dev->ifindex;
	k.sport = h->sport;
	k.dport = h->dport;
	k.version = ver;
	k.protocol = proto;
	k.direction = dir;
	__builtin_memcpy(k.saddr, h->saddr, NT_ADDR_LEN);
	__builtin_memcpy(k.daddr, h->daddr, NT_ADDR_LEN);
	bytes = skb->len - (nh - skb->data);
	f = bpf_map_lookup_elem(&ip_flows, &k);
	if (!f) {
		struct nt_ip_flow init = { .first_ns = bpf_ktime_get_ns(), .first_jiffies = bpf_jiffies64() };
		struct nt_counters *c = bpf_map_lookup_elem(&counters, &zero);

		if (!bpf_map_update_elem(&ip_flows, &k, &init, BPF_NOEXIST) && c)
			c->generated[NT_EV_IP_FLOW]++; /* per-CPU slot: entries created */
		f = bpf_map_lookup_elem(&ip_flows, &k);
		if (!f) {
			if (c)
				c->generated[NT_EV_IP_UNCOUNTED]++; /* packets: no entry to count them in */
			return false;
		}
	}
	seen = __sync_fetch_and_add(&f->packets, 1);
	__sync_fetch_and_add(&f->bytes, bytes);
	/* jiffies, not the clock: reading jiffies_64 is a load of a line the stack keeps hot,
	 * the clock an indirect call and a cold line per packet of the always-on mode */
	if (CONFIG_HZ)
		f->last_ns = f->first_ns + (bpf_jiffies64() - f->first_jiffies) * (1000000000 / CONFIG_HZ);
	else
		f->last_ns = bpf_ktime_get_ns(); /* no CONFIG_HZ to scale jiffies with */
	if (!cfg.ip_sample || seen % cfg.ip_sample)
		return false;
	__sync_fetch_and_add(&f->samples, 1);
	return true;
}

/* One IP packet: send (net_dev_queue, header at network_header, socket from skb->sk)
 * or receive (netif_receive_skb, header at skb->data, no socket yet). ip-flows counts
 * it; a record follows in full mode (NT_PROV_IP) or when it is sampled. */
static __always_inline void ip_packet(const struct sk_buff *skb, const struct sock *sk, __u8 dir, void *ctx)
{
	unsigned char *head = skb->head;
	unsigned char *nh = dir ? head + skb->network_header : skb->data;
	struct nt_header h = {};
	struct nt_event *e;
	__u8 proto, hlen, ver, l4;
	__u32 l4_off;
	struct iphdr ip = {};
	struct ipv6hdr ip6 = {};
	const struct udphdr *l4h;

	/* IPv4 (and the ports) by direct loads through read-only casts, field by field (a
	 * load may not span two fields): the always-on mode parses every packet, and a
	 * probe-read helper call per packet shows in its cost. IPv6 in one helper call. */
	const struct iphdr *p4 = bpf_rdonly_cast(nh, bpf_core_type_id_kernel(struct iphdr));
	__u8 first = *(const __u8 *)p4;

	ver = first >> 4;
	if (ver == 4) {
		ip.tos = p4->tos;
		ip.tot_len = p4->tot_len;
		ip.id = p4->id;
		ip.frag_off = p4->frag_off;
		ip.ttl = p4->ttl;
		ip.protocol = p4->protocol;
		ip.check = p4->check;
		ip.saddr = p4->saddr;
		ip.daddr = p4->daddr;
		h.family = AF_INET;
		__builtin_memcpy(h.saddr, &ip.saddr, 4);
		__builtin_memcpy(h.daddr, &ip.daddr, 4);
		proto = ip.protocol;
		hlen = (first & 0xf) * 4;
	} else if (ver == 6) {
		if (bpf_probe_read_kernel(&ip6, sizeof(ip6), nh))
			return;
		h.family = AF_INET6;
		__builtin_memcpy(h.saddr, &ip6.saddr, 16);
		__builtin_memcpy(h.daddr, &ip6.daddr, 16);
		proto = ip6.nexthdr;
		hlen = sizeof(ip6);
	} else {
		return;
	}
	l4 = proto;
	l4_off = hlen;
	if (ver == 6 && proto == 0) {
		/* hop-by-hop first (a BIG TCP packet over 64 KiB carries one): step over it so the
		 * ports, the port filter and the ip-flows key are the upper layer's (the body keeps
		 * the raw next header; user space walks the chain itself) */
		const struct ipv6_opt_hdr *hbh = bpf_rdonly_cast(nh + hlen, bpf_core_type_id_kernel(struct ipv6_opt_hdr));

		l4 = hbh->nexthdr;
		l4_off = hlen + (hbh->hdrlen + 1) * 8;
	}
	if (l4 == IPPROTO_TCP || l4 == IPPROTO_UDP || l4 == IPPROTO_UDPLITE) {
		/* TCP's ports sit where UDP's do */
		l4h = bpf_rdonly_cast(nh + l4_off, bpf_core_type_id_kernel(struct udphdr));
		h.sport = bpf_ntohs(l4h->source);
		h.dport = bpf_ntohs(l4h->dest);
	}
	h.netns = skb->dev->nd_net.net->ns.inum;
	if (cfg.providers & NT_PROV_IP_FLOWS) {
		/* the counters need an owner only to filter by process; pass() skips unattributed exclusion */
		if (cfg.tgid || cfg.cgroup_id) {
			h.cookie = cookie_read(sk);
			attribute(&h, NT_EV_IP, in_task(ctx));
		}
		if (!pass(&h))
			return;
		if (!ip_flow_count(&h, skb, nh, ver, l4, dir) && !(cfg.providers & NT_PROV_IP))
			return;
	}
	h.cookie = cookie_read(sk);
	attribute(&h, NT_EV_IP, in_task(ctx));
	if (!pass(&h) || !(e = reserve(NT_EV_IP)))
		return;
	__builtin_memcpy(&e->hdr, &h, sizeof(h));
	e->ip.if_index = skb->dev->ifindex;
	e->ip.skb_len = skb->len;
	e->ip.dev_flags = skb->dev->flags;
	e->ip.direction = dir;
	e->ip.version = ver;
	e->ip.header_length = hlen;
	e->ip.protocol = proto;
	if (ver == 4) {
		e->ip.length = bpf_ntohs(ip.tot_len);
		e->ip.ident = bpf_ntohs(ip.id);
		e->ip.frag_off = bpf_ntohs(ip.frag_off);
		e->ip.checksum = bpf_ntohs(ip.check);
		e->ip.ttl = ip.ttl;
		e->ip.tos = ip.tos;
		e->ip.flow_label = 0;
	} else {
		__u32 word = bpf_ntohl(*(__u32 *)&ip6);

		e->ip.length = bpf_ntohs(ip6.payload_len) + sizeof(ip6);
		e->ip.ident = 0;
		e->ip.frag_off = 0;
		e->ip.checksum = 0;
		e->ip.ttl = ip6.hop_limit;
		e->ip.tos = (word >> 20) & 0xff;
		e->ip.flow_label = word & 0xfffff;
	}
	{
		/* skb_shinfo() is at head + end, a computed pointer: probe reads, one for both
		 * fields where gso_segs follows gso_size (CO-RE tells; it has since 2.6) */
		struct skb_shared_info *shinfo = (struct skb_shared_info *)(head + skb->end);
		__u16 gso[2] = {};

		if (bpf_core_field_offset(struct skb_shared_info, gso_segs) ==
		    bpf_core_field_offset(struct skb_shared_info, gso_size) + 2) {
			bpf_probe_read_kernel(gso, sizeof(gso), &shinfo->gso_size);
		} else {
			gso[0] = BPF_CORE_READ(shinfo, gso_size);
			gso[1] = BPF_CORE_READ(shinfo, gso_segs);
		}
		e->ip.gso_size = gso[0];
		e->ip.gso_segs = gso[1];
	}
	__builtin_memset(e->ip._pad, 0, sizeof(e->ip._pad));
	if (ver != 6 || bpf_probe_read_kernel(e->ip.ext, sizeof(e->ip.ext), nh + sizeof(ip6)))
		__builtin_memset(e->ip.ext, 0, sizeof(e->ip.ext));
	/* IFNAMSIZ bytes by direct loads: the kernel keeps the name NUL-padded */
	__builtin_memcpy(e->ip.if_name, skb->dev->name, sizeof(e->ip.if_name));
	submit(e);
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(netif_receive_skb, struct sk_buff *skb)
{
	__u16 proto = bpf_ntohs(skb->protocol);

	if ((cfg.providers & (NT_PROV_IP | NT_PROV_IP_FLOWS)) && (proto == ETH_P_IP || proto == ETH_P_IPV6))
		ip_packet(skb, NULL, 0, ctx);
	if (cfg.providers & NT_PROV_SKB_LIFE) {
		skb_first(skb, NULL, true, in_task(ctx));
		udp_rxq_push(skb);
	}
	if ((cfg.providers & NT_PROV_UDP) && (proto == ETH_P_IP || proto == ETH_P_IPV6))
		udp_packet(skb, NULL, 0, in_task(ctx));
	return 0;
}

/* ---- udp provider: datagrams ------------------------------------------------- */

/* hop-by-hop, routing, fragment, destination options */
static __always_inline bool ip6_ext_header(__u8 proto)
{
	return proto == 0 || proto == 43 || proto == 44 || proto == 60;
}

/* An IPv6 packet whose next header is an extension header: maybe a datagram. The raw
 * bytes after the fixed header go to user space, which walks the chain (bounded) and
 * keeps it only if it ends in UDP; the udp_flows counts do not include such packets. */
static __always_inline void udp_ip6_ext(const struct sk_buff *skb, struct nt_header *h, unsigned char *nh, __u8 proto,
					__u8 dir, bool task)
{
	struct nt_event *e;

	h->cookie = cookie_read(BPF_CORE_READ(skb, sk));
	attribute(h, NT_EV_UDP, task);
	if (!pass(h) || !(e = reserve(NT_EV_UDP)))
		return;
	__builtin_memcpy(&e->hdr, h, sizeof(*h));
	e->udp.ret = 0;
	e->udp.length = 0;
	e->udp.checksum = 0;
	e->udp.gso_segs = 0;
	e->udp.direction = dir;
	e->udp.call = 0;
	e->udp.protocol = proto;
	__builtin_memset(e->udp._pad, 0, sizeof(e->udp._pad));
	if (bpf_probe_read_kernel(e->udp.ext, sizeof(e->udp.ext), nh + 40))
		__builtin_memset(e->udp.ext, 0, sizeof(e->udp.ext));
	BPF_CORE_READ_STR_INTO(&e->udp.if_name, skb, dev, name);
	submit(e);
}

/* A datagram at the device: send (net_dev_queue, header at network_header, socket
 * from skb->sk) or receive (netif_receive_skb, header at skb->data, no socket). */
static __always_inline void udp_packet(const struct sk_buff *skb, const struct sock *sk, __u8 dir, bool task)
{
	unsigned char *head = BPF_CORE_READ(skb, head);
	struct nt_udp_flow_key key = {};
	struct nt_udp_flow *f, zero = {};
	struct nt_header h = {};
	struct udphdr uh;
	struct nt_event *e;
	unsigned char *nh;
	__u8 proto, first;
	__u32 hlen, payload;

	nh = dir ? head + BPF_CORE_READ(skb, network_header) : BPF_CORE_READ(skb, data);
	if (bpf_probe_read_kernel(&first, 1, nh))
		return;
	proto = flow_from_packet(&h, skb, dir ? 0 : 2);
	if ((first >> 4) == 6 && ip6_ext_header(proto)) {
		udp_ip6_ext(skb, &h, nh, proto, dir, task);
		return;
	}
	if (proto != IPPROTO_UDP && proto != IPPROTO_UDPLITE)
		return;
	hlen = (first >> 4) == 4 ? (first & 0xf) * 4 : 40;
	if (bpf_probe_read_kernel(&uh, sizeof(uh), nh + hlen))
		return;
	h.cookie = cookie_read(sk);
	attribute(&h, NT_EV_UDP, task);
	if (!pass(&h))
		return;
	payload = bpf_ntohs(uh.len) > sizeof(uh) ? bpf_ntohs(uh.len) - sizeof(uh) : 0;
	key.netns = h.netns;
	key.sport = h.sport;
	key.dport = h.dport;
	key.family = h.family;
	key.protocol = proto;
	__builtin_memcpy(key.saddr, h.saddr, NT_ADDR_LEN);
	__builtin_memcpy(key.daddr, h.daddr, NT_ADDR_LEN);
	f = bpf_map_lookup_elem(&udp_flows, &key);
	if (!f) {
		bpf_map_update_elem(&udp_flows, &key, &zero, BPF_NOEXIST);
		f = bpf_map_lookup_elem(&udp_flows, &key);
	}
	if (f) {
		__sync_fetch_and_add(dir ? &f->packets_out : &f->packets_in, 1);
		__sync_fetch_and_add(dir ? &f->bytes_out : &f->bytes_in, payload);
	}
	e = reserve(NT_EV_UDP);
	if (!e)
		return;
	__builtin_memcpy(&e->hdr, &h, sizeof(h));
	e->udp.ret = 0;
	e->udp.length = bpf_ntohs(uh.len);
	e->udp.checksum = bpf_ntohs(uh.check);
	hlen = BPF_CORE_READ(skb, end); /* reused: the shared info sits at head + end */
	e->udp.gso_segs = BPF_CORE_READ((struct skb_shared_info *)(head + hlen), gso_segs);
	e->udp.direction = dir;
	e->udp.call = 0;
	e->udp.protocol = proto;
	__builtin_memset(e->udp._pad, 0, sizeof(e->udp._pad));
	__builtin_memset(e->udp.ext, 0, sizeof(e->udp.ext));
	BPF_CORE_READ_STR_INTO(&e->udp.if_name, skb, dev, name);
	submit(e);
}

/* A send/recv call on a UDP socket: bytes or -errno, in the caller's context. */
static __always_inline void udp_call(const struct sock *sk, int ret, __u8 dir, __u8 task)
{
	struct nt_header h = {};
	struct nt_event *e = start(&h, sk, NT_EV_UDP, task);

	if (!e)
		return;
	__builtin_memset(&e->udp, 0, sizeof(e->udp));
	e->udp.ret = ret;
	e->udp.direction = dir;
	e->udp.call = 1;
	e->udp.protocol = BPF_CORE_READ(sk, sk_protocol);
	submit(e);
}

/* ---- siftr and tcpdebug packet points ------------------------------------ */

SEC("tp_btf/tcp_probe")
int BPF_PROG(tcp_probe, struct sock *sk, const struct sk_buff *skb)
{
	__u64 cookie = sk->__sk_common.skc_cookie.counter ?: bpf_get_socket_cookie(sk); /* set once, then a load */
	/* tcp_rcv_established: skb->data is the TCP header (direct loads: skb is a trusted argument) */
	struct seg_ref r = { (const struct tcphdr *)skb->data, skb->len };
	struct seg g = {};

	if (cfg.providers & NT_PROV_SIFTR)
		siftr_packet(sk, cookie, &r, 0, ctx);
	if (cfg.providers & NT_PROV_TCPDEBUG) {
		read_seg(&g, &r);
		debug_point(sk, cookie, &g, NT_TA_INPUT, PRU_NONE, 0, 0, NULL, in_task(ctx));
	}
	return 0;
}

static __always_inline bool siftr_out_state(__u8 st)
{
	return st == TCP_ESTABLISHED || st == TCP_CLOSE_WAIT || st == TCP_FIN_WAIT1 || st == TCP_FIN_WAIT2 ||
	       st == TCP_CLOSING || st == TCP_LAST_ACK;
}

SEC("tp_btf/net_dev_queue")
int BPF_PROG(net_dev_queue, struct sk_buff *skb)
{
	__u16 proto = bpf_ntohs(skb->protocol);
	struct sock *sk;
	__u64 cookie;
	struct seg_ref r;
	struct seg g = {};

	if (proto != ETH_P_IP && proto != ETH_P_IPV6)
		return 0;
	sk = skb->sk;
	if (cfg.providers & (NT_PROV_IP | NT_PROV_IP_FLOWS))
		ip_packet(skb, sk, 1, ctx);
	if (cfg.providers & NT_PROV_SKB_LIFE)
		skb_first(skb, sk, false, in_task(ctx));
	if (cfg.providers & NT_PROV_UDP)
		udp_packet(skb, sk, 1, in_task(ctx));
	if ((cfg.providers & (NT_PROV_SKB | NT_PROV_SKB_LIFE)) && sk &&
	    (sk->sk_protocol == IPPROTO_UDP || sk->sk_protocol == IPPROTO_UDPLITE) && in_task(ctx))
		port_owner_note(sk); /* the sender, before loopback can drop its datagram inside this very call */
	if (!(cfg.providers & (NT_PROV_SIFTR | NT_PROV_TCPDEBUG)) || !full_tcp(sk))
		return 0; /* request, timewait and control sockets are not full sockets */
	cookie = sk->__sk_common.skc_cookie.counter;
	if (!cookie)
		return 0; /* a socket nettrail has not seen yet: no identity to count it under */
	r = seg_ref_at_transport(skb);
	if ((cfg.providers & NT_PROV_SIFTR) && siftr_out_state(sk->__sk_common.skc_state))
		siftr_packet(sk, cookie, &r, 1, ctx);
	if (cfg.providers & NT_PROV_TCPDEBUG) {
		read_seg(&g, &r);
		debug_point(sk, cookie, &g, NT_TA_OUTPUT, PRU_NONE, 0, 0, NULL, in_task(ctx));
	}
	return 0;
}

/* ---- attribution hooks (process context) and debug-user ------------------ */

/* The owner as recorded, if it is the current thread already: the cheap answer for
 * every send and receive on a busy socket but its first. */
static __always_inline bool owner_is_current(__u64 cookie)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct nt_owner *o = bpf_map_lookup_elem(&owners, &cookie);

	return o && o->pid == (__u32)pid_tgid && o->tgid == pid_tgid >> 32;
}

static __always_inline __u64 ptr_value(const void *p);

/* A number that names the socket while it lives: its distance from a fixed address
 * (the difference of two pointers is a plain number to a privileged program), without
 * ptr_value's helper call on the per-call path. */
static __always_inline __u64 sock_key(const struct sock *sk)
{
	return (__u64)sk - (__u64)&owner_epoch;
}

static __always_inline void user_call(const struct sock *sk, int ret, int flags, __u8 req, __u8 oob_req, void *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid(), skv = sock_key(sk), epoch = owner_epoch;
	__u32 slot = (skv >> 10) % NT_OWNER_HINTS; /* struct sock is over 1 KiB: the low bits say little */
	struct nt_owner_hint *hint = bpf_map_lookup_elem(&owner_hints, &slot);
	struct nt_owner cur = {};
	__u16 proto;
	bool task;
	__u64 cookie;

	/* tcpdebug records every call: no shortcut then */
	if (!(cfg.providers & NT_PROV_TCPDEBUG) && hint && hint->sk == skv && hint->pid_tgid == pid_tgid &&
	    hint->epoch == epoch)
		return;
	proto = sk->sk_protocol;
	if (proto == IPPROTO_UDP || proto == IPPROTO_UDPLITE) {
		task = in_task(ctx);
		if (!task)
			return;
		if (cfg.providers & (NT_PROV_SKB | NT_PROV_SKB_LIFE))
			port_owner_note(sk);
		if (cfg.providers & NT_PROV_UDP)
			udp_call(sk, ret, req == PRU_SEND, hook_call(task)); /* start() notes the owner */
		return;
	}
	if (proto != IPPROTO_TCP)
		return;
	cookie = bpf_get_socket_cookie((void *)sk);
	if (cfg.providers & NT_PROV_TCPDEBUG) {
		debug_point(sk, cookie, NULL, NT_TA_USER, (flags & MSG_OOB) ? oob_req : req, 0, 0, NULL,
			    hook_call(in_task(ctx)));
		return; /* debug_point's attribute() already noted the owner */
	}
	if (owner_is_current(cookie)) {
		if (hint) { /* the epoch from before the lookup: a change since then retires it */
			hint->sk = skv;
			hint->pid_tgid = pid_tgid;
			hint->epoch = epoch;
		}
		return;
	}
	if (!in_task(ctx))
		return;
	owner_from_current(&cur);
	owner_note(cookie, &cur);
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(sock_send_length, struct sock *sk, int ret, int flags)
{
	user_call(sk, ret, flags, PRU_SEND, PRU_SENDOOB, ctx);
	return 0;
}

static __always_inline void skb_recv_done(const struct sock *sk, int ret, int flags, bool task);

SEC("tp_btf/sock_recv_length")
int BPF_PROG(sock_recv_length, struct sock *sk, int ret, int flags)
{
	user_call(sk, ret, flags, PRU_RCVD, PRU_RCVOOB, ctx);
	if ((cfg.providers & NT_PROV_SKB_LIFE) && in_task(ctx))
		skb_recv_done(sk, ret, flags, true);
	return 0;
}

/* ---- skb provider: lifecycles -------------------------------------------- */

#define SKB_END_CONSUMED 1
#define SKB_END_LAST_SEEN 3

static __always_inline __u64 ptr_value(const void *p)
{
	__u64 v = 0;

	bpf_probe_read_kernel(&v, sizeof(v), &p); /* the address as a number, never exported */
	return v;
}

static __always_inline void skb_emit_as(struct nt_skb_id *id, __u32 len, __u16 protocol, __u8 stage, __u8 end,
					__s32 rc, __u64 now, bool task)
{
	struct nt_event *e;

	id->last_len = len;
	e = reserve(NT_EV_SKB_STAGE);
	if (!e)
		return;
	__builtin_memcpy(&e->hdr, &id->hdr, sizeof(e->hdr));
	e->hdr.type = NT_EV_SKB_STAGE;
	e->hdr.ts_ns = now;
	e->hdr.cpu = bpf_get_smp_processor_id();
	e->hdr.ctx = task ? NT_CTX_TASK : NT_CTX_SOFTIRQ;
	e->skb_stage.skb_uid = id->uid;
	e->skb_stage.since_prev_ns = now - id->prev_ns;
	e->skb_stage.since_first_ns = now - id->hdr.ts_ns;
	e->skb_stage.skb_gen = id->gen;
	e->skb_stage.len = len;
	e->skb_stage.rc = rc;
	e->skb_stage.protocol = protocol;
	e->skb_stage.stage = stage;
	e->skb_stage.end = end;
	submit(e);
}

static __always_inline void skb_emit(struct nt_skb_id *id, const struct sk_buff *skb, __u8 stage, __u8 end, __s32 rc,
				     __u64 now, bool task)
{
	skb_emit_as(id, BPF_CORE_READ(skb, len), bpf_ntohs(BPF_CORE_READ(skb, protocol)), stage, end, rc, now, task);
}

/* the ethertype of a buffer no longer there to read (inferred stages) */
static __always_inline __u16 skb_id_protocol(const struct nt_skb_id *id)
{
	return id->hdr.family == AF_INET6 ? ETH_P_IPV6 : ETH_P_IP;
}

/* Is a buffer seen again at a first-sighting hook still the same lifetime? Received
 * after being sent: yes (loopback turns the sent buffer into the received one). Sent
 * after being received: only without a socket (forwarding); a socket's new buffer at
 * the same address (and often the same recycled head) is a new lifetime, since UDP and
 * TCP free read buffers without a tracepoint. */
static __always_inline bool skb_was_sent(__u8 last)
{
	return last == NT_SKB_TX_FIRST || last == NT_SKB_QUEUE || last == NT_SKB_XMIT_START || last == NT_SKB_XMIT;
}

static __always_inline bool skb_rx_entry_stage(__u8 s)
{
	return s == NT_SKB_RX_FIRST_GRO || s == NT_SKB_RX_FIRST_NETIF || s == NT_SKB_RX_FIRST_ENTRY;
}

/* Received (netif_receive_skb) after being sent or first seen at a receive entry hook:
 * the same lifetime. */
static __always_inline bool skb_same_life(__u8 last, bool rx, bool has_sock)
{
	bool was_sent = skb_was_sent(last);

	if (rx)
		return was_sent || skb_rx_entry_stage(last);
	return last != NT_SKB_COPY && last != NT_SKB_COPY_INFERRED && (was_sent || !has_sock);
}

/* A first-sighting hook (rx: a receive entry hook or netif_receive_skb, tx:
 * net_dev_queue). The same lifetime gets a stage; otherwise the address was reused
 * without an observed free: close the old lifetime (last-seen) and start a new
 * generation, whose first stage is `first`. */
static __always_inline void skb_first_at(const struct sk_buff *skb, const struct sock *sk, bool rx, __u8 first,
					 bool task)
{
	__u64 addr = ptr_value(skb), head = (__u64)BPF_CORE_READ(skb, head), now = bpf_ktime_get_ns();
	struct nt_skb_id *id = bpf_map_lookup_elem(&skbs, &addr);
	bool entry = skb_rx_entry_stage(first);
	struct nt_skb_id fresh = {};
	__u32 zero = 0, *g;
	__u64 *counter;

	if (entry && id && id->head == head && skb_was_sent(id->last_stage))
		return; /* sent on this host (loopback, veth): its rx stage comes at netif_receive_skb */
	if (!entry && id && id->head == head && skb_same_life(id->last_stage, rx, sk != NULL)) {
		skb_emit(id, skb, rx ? NT_SKB_RX : NT_SKB_QUEUE, 0, 0, now, task);
		id->prev_ns = now;
		id->last_stage = rx ? NT_SKB_RX : NT_SKB_QUEUE;
		return;
	}
	if (id) {
		/* the old lifetime's own length and protocol: skb now describes the address's new buffer */
		skb_emit_as(id, id->last_len, skb_id_protocol(id), NT_SKB_LAST_SEEN, SKB_END_LAST_SEEN, 0, now, task);
		bpf_map_delete_elem(&skbs, &addr);
	}
	flow_from_packet(&fresh.hdr, skb, rx ? 2 : 0);
	fresh.hdr.cookie = cookie_read(sk);
	attribute(&fresh.hdr, NT_EV_SKB_STAGE, task);
	if (!pass(&fresh.hdr))
		return;
	g = bpf_map_lookup_elem(&skb_gens, &addr);
	fresh.gen = g ? *g + 1 : 1;
	bpf_map_update_elem(&skb_gens, &addr, &fresh.gen, BPF_ANY);
	counter = bpf_map_lookup_elem(&skb_uids, &zero);
	if (!counter)
		return;
	*counter += 1;
	fresh.uid = ((__u64)bpf_get_smp_processor_id() << 48) | *counter; /* unique: CPU in the top bits */
	fresh.head = head;
	fresh.prev_ns = now;
	fresh.hdr.ts_ns = now;
	fresh.last_stage = first;
	fresh.last_len = skb->len;
	bpf_map_update_elem(&skbs, &addr, &fresh, BPF_ANY);
	skb_emit(&fresh, skb, fresh.last_stage, 0, 0, now, task);
}

static __always_inline void skb_first(const struct sk_buff *skb, const struct sock *sk, bool rx, bool task)
{
	skb_first_at(skb, sk, rx, rx ? NT_SKB_RX_FIRST : NT_SKB_TX_FIRST, task);
}

/* Receive entry hooks (providers.md 7.2, whichever first): they see a buffer before GRO
 * and before netif_receive_skb, so a received lifetime starts there. */
static __always_inline void skb_rx_entry(const struct sk_buff *skb, __u8 first, bool task)
{
	__u16 proto = bpf_ntohs(BPF_CORE_READ(skb, protocol));

	if ((cfg.providers & NT_PROV_SKB_LIFE) && (proto == ETH_P_IP || proto == ETH_P_IPV6))
		skb_first_at(skb, NULL, true, first, task);
}

SEC("tp_btf/napi_gro_receive_entry")
int BPF_PROG(napi_gro_receive_entry, const struct sk_buff *skb)
{
	skb_rx_entry(skb, NT_SKB_RX_FIRST_GRO, in_task(ctx));
	return 0;
}

SEC("tp_btf/netif_rx_entry")
int BPF_PROG(netif_rx_entry, const struct sk_buff *skb)
{
	skb_rx_entry(skb, NT_SKB_RX_FIRST_NETIF, in_task(ctx));
	return 0;
}

SEC("tp_btf/netif_receive_skb_entry")
int BPF_PROG(netif_receive_skb_entry, const struct sk_buff *skb)
{
	skb_rx_entry(skb, NT_SKB_RX_FIRST_ENTRY, in_task(ctx));
	return 0;
}

/* A later stage of a tracked buffer; untracked (filtered out, or older) ones are ignored. */
static __always_inline void skb_later(const struct sk_buff *skb, __u8 stage, __u8 end, __s32 rc, bool task)
{
	__u64 addr = ptr_value(skb), now;
	struct nt_skb_id *id = bpf_map_lookup_elem(&skbs, &addr);

	if (!id)
		return;
	now = bpf_ktime_get_ns();
	if (id->head != (__u64)skb->head) {
		/* Another buffer at the address, one no first-sighting hook saw (an AF_UNIX
		 * message, or a buffer the filters left out): the lifetime ended unseen. */
		skb_emit_as(id, id->last_len, skb_id_protocol(id), NT_SKB_LAST_SEEN, SKB_END_LAST_SEEN, 0, now, task);
		bpf_map_delete_elem(&skbs, &addr);
		return;
	}
	if ((stage == NT_SKB_XMIT_START || stage == NT_SKB_XMIT) && !skb_was_sent(id->last_stage))
		return; /* veth: the peer's receive entry hook ran inside its sender's xmit */
	skb_emit(id, skb, stage, end, rc, now, task);
	if (end) {
		bpf_map_delete_elem(&skbs, &addr);
		return;
	}
	id->prev_ns = now;
	id->last_stage = stage;
}

SEC("tp_btf/net_dev_start_xmit")
int BPF_PROG(net_dev_start_xmit, const struct sk_buff *skb, const struct net_device *dev)
{
	skb_later(skb, NT_SKB_XMIT_START, 0, 0, in_task(ctx));
	return 0;
}

SEC("tp_btf/net_dev_xmit")
int BPF_PROG(net_dev_xmit, struct sk_buff *skb, int rc, struct net_device *dev, unsigned int len)
{
	skb_later(skb, NT_SKB_XMIT, 0, rc, in_task(ctx));
	return 0;
}

/* ---- skb provider: inferred consumes --------------------------------------
 * TCP (tcp_eat_recv_skb) and UDP (skb_consume_udp) free a read buffer through
 * skb_attempt_defer_free: on the allocating CPU that is kfree_skb_napi_cache /
 * __kfree_skb, which have no tracepoint; only a cross-CPU deferral is freed by
 * napi_consume_skb (consume_skb tracepoint, the real stage). So a buffer that a
 * recvmsg copied whole ends at that call's sock_recv_length: it was freed between the
 * copy and then. TCP: skb_copy_datagram_iovec names the buffer; the bytes count once
 * the call returns without MSG_PEEK. UDP copies a linear datagram without a
 * tracepoint: the receive side queues tracked datagrams per (netns, port) in arrival
 * order, and a recvmsg takes the oldest still tracked (drops have untracked theirs). */

#define MSG_PEEK 2
#define NT_UDP_RXQ_SKIP 8

static __always_inline void skb_read_note(const struct sk_buff *skb, int len)
{
	__u64 addr = ptr_value(skb);
	__u32 tid = (__u32)bpf_get_current_pid_tgid(), zero = 0, n;
	struct nt_skb_id *id = bpf_map_lookup_elem(&skbs, &addr);
	struct nt_skb_reads *rs, *z;

	if (!id)
		return;
	rs = bpf_map_lookup_elem(&skb_reads, &tid);
	if (!rs) {
		z = bpf_map_lookup_elem(&skb_reads_zero, &zero);
		if (!z || bpf_map_update_elem(&skb_reads, &tid, z, BPF_ANY))
			return;
		rs = bpf_map_lookup_elem(&skb_reads, &tid);
		if (!rs)
			return;
	}
	if (!id->hdr.cookie) /* first seen without a socket (received): tie it to its reader */
		id->hdr.cookie = cookie_read(BPF_CORE_READ(skb, sk));
	n = rs->n;
	if (n >= NT_SKB_READS)
		return; /* a longer read: its later buffers end last-seen */
	rs->r[n].addr = addr;
	rs->r[n].uid = id->uid;
	rs->r[n].len = len;
	rs->r[n].skb_len = BPF_CORE_READ(skb, len);
	rs->r[n].alloc_cpu = BPF_CORE_READ(skb, alloc_cpu);
	rs->n = n + 1;
}

/* sock_recv_length: the buffers this call copied whole are consumed */
static __always_inline void skb_reads_settle(int ret, int flags, bool task)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid(), i;
	struct nt_skb_reads *rs = bpf_map_lookup_elem(&skb_reads, &tid);
	__u64 now = bpf_ktime_get_ns();

	if (!rs)
		return;
	if (ret > 0 && !(flags & MSG_PEEK)) {
		for (i = 0; i < NT_SKB_READS; i++) {
			struct nt_skb_read *r = &rs->r[i];
			struct nt_skb_id *id;

			if (i >= rs->n)
				break;
			id = bpf_map_lookup_elem(&skbs, &r->addr);
			if (!id || id->uid != r->uid)
				continue; /* freed with a tracepoint already, or a new lifetime */
			id->copied += r->len;
			if (id->copied < r->skb_len)
				continue; /* partly read: the rest stays queued */
			if (r->alloc_cpu != bpf_get_smp_processor_id())
				continue; /* freed later on its allocating CPU by napi_consume_skb: a real consume_skb */
			skb_emit_as(id, r->skb_len, skb_id_protocol(id), NT_SKB_CONSUME_INFERRED, SKB_END_CONSUMED, 0, now,
				    task);
			bpf_map_delete_elem(&skbs, &r->addr);
		}
	}
	bpf_map_delete_elem(&skb_reads, &tid);
}

/* netif_receive_skb of a tracked UDP datagram: queue it for its local port */
static __always_inline void udp_rxq_push(const struct sk_buff *skb)
{
	__u64 addr = ptr_value(skb);
	struct nt_skb_id *id = bpf_map_lookup_elem(&skbs, &addr);
	unsigned char *nh = BPF_CORE_READ(skb, data);
	struct nt_udp_rxq_key k = {};
	struct nt_udp_rxq_val v = {};
	struct nt_udp_rxq_ends fresh = {}, *q;
	__u8 first, proto, hlen;
	__u16 ports[2];

	if (!id || bpf_probe_read_kernel(&first, 1, nh))
		return;
	if ((first >> 4) == 4) {
		hlen = (first & 0xf) * 4;
		if (bpf_probe_read_kernel(&proto, 1, nh + 9))
			return;
	} else if ((first >> 4) == 6) {
		hlen = 40; /* extension headers: not queued, such a datagram ends last-seen */
		if (bpf_probe_read_kernel(&proto, 1, nh + 6))
			return;
	} else {
		return;
	}
	if ((proto != IPPROTO_UDP && proto != IPPROTO_UDPLITE) || bpf_probe_read_kernel(ports, sizeof(ports), nh + hlen))
		return;
	k.netns = BPF_CORE_READ(skb, dev, nd_net.net, ns.inum);
	k.port = bpf_ntohs(ports[1]);
	q = bpf_map_lookup_elem(&udp_rxq_ends, &k);
	if (!q) {
		bpf_map_update_elem(&udp_rxq_ends, &k, &fresh, BPF_NOEXIST);
		if (!(q = bpf_map_lookup_elem(&udp_rxq_ends, &k)))
			return;
	}
	k.seq = q->tail++; /* not atomic (fetch-add's result needs -mcpu=v3): one port's datagrams arrive on one CPU at a time, mostly */
	v.addr = addr;
	v.uid = id->uid;
	v.len = BPF_CORE_READ(skb, len);
	v.alloc_cpu = BPF_CORE_READ(skb, alloc_cpu);
	bpf_map_update_elem(&udp_rxq, &k, &v, BPF_ANY);
}

/* sock_recv_length of a UDP socket (not a peek): the oldest tracked datagram queued
 * for its port was copied (inferred unless skb_copy_datagram_iovec saw it) and freed */
static __always_inline void udp_rxq_pop(const struct sock *sk, int ret, bool task)
{
	struct nt_udp_rxq_key k = {};
	struct nt_udp_rxq_ends *q;
	__u64 now = bpf_ktime_get_ns(), addr, uid;
	__u32 i, len, cpu;

	k.netns = BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
	k.port = BPF_CORE_READ(sk, __sk_common.skc_num);
	q = bpf_map_lookup_elem(&udp_rxq_ends, &k);
	if (!q)
		return;
	for (i = 0; i < NT_UDP_RXQ_SKIP; i++) {
		struct nt_udp_rxq_val *v;
		struct nt_skb_id *id;

		if ((__s32)(q->tail - q->head) <= 0)
			return;
		k.seq = q->head++;
		v = bpf_map_lookup_elem(&udp_rxq, &k);
		if (!v)
			continue;
		addr = v->addr;
		uid = v->uid;
		len = v->len;
		cpu = v->alloc_cpu;
		bpf_map_delete_elem(&udp_rxq, &k);
		id = bpf_map_lookup_elem(&skbs, &addr);
		if (!id || id->uid != uid)
			continue; /* dropped (untracked by kfree_skb) or a new lifetime */
		if (!id->hdr.cookie) /* first seen without a socket (received): tie it to its reader */
			id->hdr.cookie = cookie_of(sk);
		if (id->last_stage != NT_SKB_COPY) {
			skb_emit_as(id, len, skb_id_protocol(id), NT_SKB_COPY_INFERRED, 0, ret, now, task);
			id->prev_ns = now;
			id->last_stage = NT_SKB_COPY_INFERRED;
		}
		if (cpu != bpf_get_smp_processor_id())
			return; /* freed later on its allocating CPU by napi_consume_skb: a real consume_skb */
		skb_emit_as(id, len, skb_id_protocol(id), NT_SKB_CONSUME_INFERRED, SKB_END_CONSUMED, 0, now, task);
		bpf_map_delete_elem(&skbs, &addr);
		return;
	}
}

SEC("tp_btf/skb_copy_datagram_iovec")
int BPF_PROG(skb_copy_datagram_iovec, const struct sk_buff *skb, int len)
{
	bool task = in_task(ctx);

	if (task && len > 0 && (cfg.providers & NT_PROV_SKB_LIFE))
		skb_read_note(skb, len); /* first: it may tie the buffer to its socket */
	skb_later(skb, NT_SKB_COPY, 0, len, task);
	return 0;
}

static __always_inline void skb_recv_done(const struct sock *sk, int ret, int flags, bool task)
{
	__u16 proto = BPF_CORE_READ(sk, sk_protocol);

	if ((proto == IPPROTO_UDP || proto == IPPROTO_UDPLITE) && ret >= 0 && !(flags & MSG_PEEK))
		udp_rxq_pop(sk, ret, task);
	skb_reads_settle(ret, flags, task);
}

SEC("tp_btf/consume_skb")
int BPF_PROG(consume_skb, struct sk_buff *skb, void *location)
{
	skb_later(skb, NT_SKB_CONSUME, SKB_END_CONSUMED, 0, in_task(ctx));
	return 0;
}

/* ---- skb provider: drops ------------------------------------------------ */

/* true while this CPU's drop events this second stay under cfg.drop_rate */
static __always_inline bool drop_event_allowed(__u64 now)
{
	__u32 zero = 0;
	struct nt_drop_budget *b;

	if (!cfg.drop_rate)
		return true;
	b = bpf_map_lookup_elem(&drop_budget, &zero);
	if (!b)
		return false;
	if (now - b->window_ns >= 1000000000ULL) {
		b->window_ns = now;
		b->used = 0;
	}
	return b->used++ < cfg.drop_rate;
}

static __always_inline void skb_drop(const struct sk_buff *skb, void *location, __u32 reason, const struct sock *sk,
				     bool task)
{
	struct nt_drop_key key = {};
	struct nt_header h = {};
	struct nt_owner *o;
	struct nt_event *e;
	__u64 *count, one = 1, addr, uid = 0, first = 0;
	struct nt_skb_id *id;
	__u32 gen = 0;
	unsigned char *head;
	__u32 end;
	__u8 l4;

	l4 = flow_from_packet(&h, skb, false);
	if (!h.netns && sk) /* TCP has reused skb->dev by the time it drops queued data (TCP_ZEROWINDOW) */
		h.netns = BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
	h.cookie = cookie_read(sk);
	attribute(&h, NT_EV_SKB_DROP, task);
	if (!task && h.attribution == NT_ATTR_NONE && (l4 == IPPROTO_UDP || l4 == IPPROTO_UDPLITE)) {
		/* a socketless datagram: the sender on this host, by its source port */
		struct nt_listen_key k = { .netns = h.netns, .port = h.sport };

		o = bpf_map_lookup_elem(&port_owners, &k);
		if (o)
			copy_owner(&h, o, NT_ATTR_OWNER);
	}
	if (!pass(&h))
		return;
	key.location = (__u64)location;
	key.reason = reason;
	key.protocol = bpf_ntohs(BPF_CORE_READ(skb, protocol));
	count = bpf_map_lookup_elem(&drops, &key);
	if (count)
		__sync_fetch_and_add(count, 1);
	else if (bpf_map_update_elem(&drops, &key, &one, BPF_NOEXIST))
		if ((count = bpf_map_lookup_elem(&drops, &key)))
			__sync_fetch_and_add(count, 1); /* another CPU created it first */
	addr = ptr_value(skb);
	id = bpf_map_lookup_elem(&skbs, &addr);
	if (id && id->head != (__u64)BPF_CORE_READ(skb, head)) {
		/* the address's earlier buffer ended unseen (see skb_later): not this drop's lifetime */
		skb_emit_as(id, id->last_len, skb_id_protocol(id), NT_SKB_LAST_SEEN, SKB_END_LAST_SEEN, 0, h.ts_ns, task);
		bpf_map_delete_elem(&skbs, &addr);
		id = NULL;
	}
	if (id) {
		uid = id->uid;
		gen = id->gen;
		first = id->hdr.ts_ns;
		bpf_map_delete_elem(&skbs, &addr); /* dropped: the lifetime ends here */
	}
	if (!drop_event_allowed(h.ts_ns) || !(e = reserve(NT_EV_SKB_DROP)))
		return;
	__builtin_memcpy(&e->hdr, &h, sizeof(h));
	e->skb_drop.skb_uid = uid;
	e->skb_drop.skb_gen = gen;
	e->skb_drop.since_first_ns = first ? h.ts_ns - first : 0;
	__builtin_memset(e->skb_drop._pad, 0, sizeof(e->skb_drop._pad));
	e->skb_drop.location = key.location;
	e->skb_drop.reason = reason;
	e->skb_drop.len = BPF_CORE_READ(skb, len);
	e->skb_drop.data_len = BPF_CORE_READ(skb, data_len);
	e->skb_drop.truesize = BPF_CORE_READ(skb, truesize);
	e->skb_drop.mark = BPF_CORE_READ(skb, mark);
	e->skb_drop.if_index = BPF_CORE_READ(skb, dev, ifindex);
	e->skb_drop.protocol = key.protocol;
	e->skb_drop.data_off = BPF_CORE_READ(skb, data) - BPF_CORE_READ(skb, head);
	e->skb_drop.l4_proto = l4;
	e->skb_drop.pkt_type = BPF_CORE_READ_BITFIELD_PROBED(skb, pkt_type);
	e->skb_drop.cloned = BPF_CORE_READ_BITFIELD_PROBED(skb, cloned);
	head = BPF_CORE_READ(skb, head);
	end = BPF_CORE_READ(skb, end);
	e->skb_drop.nr_frags = BPF_CORE_READ((struct skb_shared_info *)(head + end), nr_frags);
	BPF_CORE_READ_STR_INTO(&e->skb_drop.if_name, skb, dev, name);
	submit(e);
}

/* tcpdebug's debug-drop: drops with a TCP_* reason, with the socket's control block */
static __always_inline void debug_drop(const struct sk_buff *skb, __u32 r, struct sock *sk, bool task)
{
	struct seg g = {};
	__u64 word;

	if (r >= 128)
		return;
	word = r < 64 ? cfg.drop_reasons[0] : cfg.drop_reasons[1]; /* constant offsets only */
	if (!(word & (1ULL << (r & 63))))
		return;
	if (!sk)
		sk = skb->sk; /* a BTF pointer, as full_tcp's direct loads need */
	if (sk && !full_tcp(sk))
		sk = NULL; /* e.g. a timewait socket: describe the segment instead */
	seg_at_transport(&g, skb);
	debug_point(sk, cookie_read(sk), &g, NT_TA_DROP, PRU_NONE, 0, r, skb, task);
}

#define SKB_CONSUMED 1

SEC("tp_btf/kfree_skb")
int BPF_PROG(kfree_skb, struct sk_buff *skb, void *location, enum skb_drop_reason reason, struct sock *rx_sk)
{
	__u32 r = reason;
	bool task;

	if (r <= SKB_CONSUMED)
		return 0;
	task = in_task(ctx);
	if (cfg.providers & (NT_PROV_SKB | NT_PROV_SKB_LIFE))
		skb_drop(skb, location, r, rx_sk ? rx_sk : BPF_CORE_READ(skb, sk), task);
	if (cfg.providers & NT_PROV_TCPDEBUG)
		debug_drop(skb, r, rx_sk, task);
	return 0;
}

/* ---- udp provider ----------------------------------------------------------- */

SEC("tp_btf/udp_fail_queue_rcv_skb")
int BPF_PROG(udp_fail_queue_rcv_skb, int rc, struct sock *sk, struct sk_buff *skb)
{
	struct nt_header h = {};
	struct nt_event *e = start(&h, sk, NT_EV_UDP_FAIL, in_task(ctx));

	if (!e)
		return 0;
	e->udp_fail.rc = rc;
	e->udp_fail.rmem_alloc = BPF_CORE_READ(sk, sk_backlog.rmem_alloc.counter);
	e->udp_fail.truesize = BPF_CORE_READ(skb, truesize);
	e->udp_fail.rcvbuf = BPF_CORE_READ(sk, sk_rcvbuf);
	e->udp_fail.sk_protocol = BPF_CORE_READ(sk, sk_protocol);
	e->udp_fail._pad[0] = e->udp_fail._pad[1] = 0;
	submit(e);
	return 0;
}

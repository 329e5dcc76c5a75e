/* SPDX-License-Identifier: GPL-2.0 */
/* attribution.bpf.h: whose a record is (providers.md 9.1 and 9.3). A socket is named
 * by its cookie and 4-tuple; its owner is the process that last used it in a system
 * call (the `owners` map, filled by the attribution programs in attribution.bpf.c and
 * tcp.bpf.c); attribute() decides, per hook, whether current or the owner map speaks
 * for the event; pass() applies the filters; start() does all of it for a record
 * about a socket and reserves its ring slot.
 */
#ifndef __NT_ATTRIBUTION_BPF_H
#define __NT_ATTRIBUTION_BPF_H

#include "maps.bpf.h"
#include "core_fixes.bpf.h"
#include "helpers.bpf.h"

#ifdef NT_LEGACY
/* Tracing programs may call bpf_get_socket_cookie() from 5.12 (commit c5dbb89fc2ac "bpf:
 * Expose bpf_get_socket_cookie to tracing programs"); before (Debian 11's 5.10), the
 * verifier refuses the call. The legacy object, which kernels before 5.12 load
 * (core_fixes.bpf.h, NT_LEGACY; not a CO-RE branch: its dead code still took stack in the
 * compat object's frames), reads the cookie from the socket itself: skc_cookie, which
 * sock_gen_cookie() fills at the first request. The cgroup programs of attribution.bpf.c
 * request it for every socket made by socket() (sock_create) and for every passive child
 * as it is established (sock_ops), so the records name the cookie SO_COOKIE gives, as on
 * later kernels. A socket still without one (made before the collector started, a
 * kernel's socket, a child never established) gets a substitute at its first sighting
 * (assign), kept by its address in `cookie_subs`: bit 62 set, so never a kernel cookie,
 * and numbered per CPU. Should the kernel give it a cookie later, its records from then
 * on carry that one (docs/collector.md, "Kernel support"). */
#define NT_COOKIE_SUB (1ULL << 62) /* bit 62: the webapp stores cookies in signed 64-bit columns */

/* key: the socket's address as a number (sock_key's), which the caller computes: for a
 * BTF pointer by a pointer difference, for either kind through helper calls
 * (cookie_read), as 5.10 takes them; computed only once the cookie is known to be 0. */
#define NT_COOKIE_COMPAT(sk, assign, key_expr)                                         \
	({                                                                             \
		__u64 __nt_cookie = BPF_CORE_READ(sk, __sk_common.skc_cookie.counter); \
		__nt_cookie ? __nt_cookie : cookie_compat(key_expr, assign);            \
	})

static __always_inline __u64 cookie_compat(__u64 key, bool assign)
{
	__u64 cookie, *sub, *next;
	__u32 zero = 0;

	sub = bpf_map_lookup_elem(&cookie_subs, &key);
	if (sub || !assign)
		return sub ? *sub : 0;
	next = bpf_map_lookup_elem(&cookie_next, &zero);
	if (!next)
		return 0;
	cookie = NT_COOKIE_SUB | ((__u64)bpf_get_smp_processor_id() << 40) | (++*next & ((1ULL << 40) - 1));
	bpf_map_update_elem(&cookie_subs, &key, &cookie, BPF_NOEXIST);
	sub = bpf_map_lookup_elem(&cookie_subs, &key); /* another CPU's, if it came first */
	return sub ? *sub : cookie;
}
#endif

static __always_inline __u64 cookie_of(const struct sock *sk)
{
	if (!sk)
		return 0;
#ifdef NT_LEGACY
	return NT_COOKIE_COMPAT(sk, true, (__u64)sk - (__u64)&owner_epoch); /* as sock_key */
#else
	return bpf_get_socket_cookie((void *)sk);
#endif
}

/* For pointers read from memory (skb->sk), which the socket helpers refuse: the
 * cookie as already assigned, 0 if nobody asked for it yet (the state-change and
 * tcp_probe programs ask for every TCP socket they see). */
static __always_inline __u64 cookie_read(const struct sock *sk)
{
	if (!sk)
		return 0;
#ifdef NT_LEGACY
	/* sk is a plain number here or a BTF pointer: 5.10 refuses either minus the other
	 * kind ("math between ... pointer and register with unbounded min value"), so both
	 * addresses as numbers, through helper calls */
	return NT_COOKIE_COMPAT(sk, false, ptr_value(sk) - ptr_value(&owner_epoch));
#else
	return BPF_CORE_READ(sk, __sk_common.skc_cookie.counter);
#endif
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
	if (!h->dport && h->cookie && sk->__sk_common.skc_state == TCP_CLOSE && sk->sk_protocol == IPPROTO_TCP) {
		/* disconnected (tcp_disconnect() zeroed the peer port and the local address):
		 * the tuple it had at its change to CLOSE (map `closed`, tcp.bpf.c) */
		struct nt_closed *c = bpf_map_lookup_elem(&closed, &h->cookie);

		if (c) {
			h->family = c->family;
			h->sport = c->sport;
			h->dport = c->dport;
			__builtin_memcpy(h->saddr, c->saddr, NT_ADDR_LEN);
			__builtin_memcpy(h->daddr, c->daddr, NT_ADDR_LEN);
		}
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

static __always_inline void port_owner_set(__u16 port, __u32 netns)
{
	struct nt_listen_key k = {};
	struct nt_owner cur = {};
	struct nt_owner *old;

	k.port = port;
	k.netns = netns;
	if (!k.port)
		return;
	owner_from_current(&cur);
	old = bpf_map_lookup_elem(&port_owners, &k);
	if (old && old->pid == cur.pid && old->tgid == cur.tgid)
		return;
	cur.first_ns = bpf_ktime_get_ns();
	bpf_map_update_elem(&port_owners, &k, &cur, BPF_ANY);
}

static __always_inline void port_owner_note(const struct sock *sk)
{
	port_owner_set(BPF_CORE_READ(sk, __sk_common.skc_num), BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum));
}

/* The owner as recorded, if it is the current thread already: the cheap answer for
 * every send and receive on a busy socket but its first. */
static __always_inline bool owner_is_current(__u64 cookie)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct nt_owner *o = bpf_map_lookup_elem(&owners, &cookie);

	return o && o->pid == (__u32)pid_tgid && o->tgid == pid_tgid >> 32;
}

/* A number that names the socket while it lives: its distance from a fixed address
 * (the difference of two pointers is a plain number to a privileged program), without
 * ptr_value's helper call on the per-call path. */
static __always_inline __u64 sock_key(const struct sock *sk)
{
	return (__u64)sk - (__u64)&owner_epoch;
}

#endif /* __NT_ATTRIBUTION_BPF_H */

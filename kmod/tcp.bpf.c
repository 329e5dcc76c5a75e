// SPDX-License-Identifier: GPL-2.0
/* tcp.bpf.c: the tcp provider (providers.md 4): a connection's state changes
 * (inet_sock_set_state), retransmissions (tcp_retransmit_skb, tcp_retransmit_synack),
 * resets sent and received, congestion-state changes and the socket's end
 * (tcp_destroy_sock, with its final counters).
 *
 * inet_sock_set_state and tcp_destroy_sock are loaded for every provider: the first
 * records who opened, listened on or closed a socket (and hands a listener's owner to
 * its passive children), the second forgets the socket in every per-socket map. They
 * also carry tcpdebug's user-request points and siftr's final flow counts.
 *
 * nettrail's BPF object is linked from one .bpf.c per provider (kmod/Makefile): tcp,
 * siftr, ip, udp, skb, and attribution.bpf.c for the socket calls every provider
 * needs; tcpdebug rides on the others' programs (tcpdebug.bpf.h). Programs are named
 * after their tracepoint; the loader (collector/bpf/loader.py, PROGRAMS) loads the
 * ones the chosen providers need. The kernel records identity and raw values; units
 * and names are the translators' job (translators/tcp.py, siftr.py, tcpdebug.py,
 * ip.py, udp.py, skb.py).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "nettrail.h"
#include "attribution.bpf.h"
#include "siftr.bpf.h"
#include "tcpdebug.bpf.h"
#define NT_FOLD_DEFINE
#include "fold.bpf.h"

/* A passive child's LISTEN -> SYN_RECV fires in inet_csk_clone_lock() before the clone
 * is finished: up to at least 6.12 its ports and peer are still the listener's, and its
 * cookie is set from the request (ir_cookie) only after the tracepoint, so a cookie taken
 * there names no socket anybody sees again (the record was lost to its connection, and
 * the owner it inherited went to that cookie). The change waits here, keyed by the
 * socket's address, for the child's next change (SYN_RECV -> ESTABLISHED or CLOSE, in the
 * same softirq; its congestion state is set before that, see child_born), where cookie
 * and 4-tuple are final; it is recorded then, with its own time, CPU and context. */
struct nt_child {
	__u64 ts_ns;
	__u32 cpu;
	__u8 ctx;
	__u8 _pad[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct nt_child);
} children SEC(".maps");

/* child_born()'s header: before 6.14 the verifier adds its frame to its caller's
 * (inet_sock_set_state's 328 bytes) against 512, so it lives here, not on the stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nt_header);
} child_header SEC(".maps");

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

static __always_inline void child_cloned(const struct sock *sk, bool task)
{
	struct nt_child c = { .ts_ns = bpf_ktime_get_ns(), .cpu = bpf_get_smp_processor_id() };
	__u64 key = sock_key(sk);

	c.ctx = task ? NT_CTX_TASK : NT_CTX_SOFTIRQ;
	bpf_map_update_elem(&children, &key, &c, BPF_ANY);
}

/* The child's first event after the clone (its congestion state set to Open by
 * tcp_init_transfer(), or its change out of SYN_RECV): it inherits its listener's owner
 * under its real cookie, and its LISTEN -> SYN_RECV is recorded with its own time. */
static __noinline void child_born(const struct sock *sk)
{
	__u64 key = sock_key(sk);
	struct nt_child *p = bpf_map_lookup_elem(&children, &key);
	__u32 zero = 0;
	struct nt_header *h;
	struct nt_child c;
	struct nt_event *e;

	if (!p)
		return;
	c = *p;
	bpf_map_delete_elem(&children, &key);
	h = bpf_map_lookup_elem(&child_header, &zero);
	if (!h)
		return;
	__builtin_memset(h, 0, sizeof(*h));
	h->cookie = cookie_of(sk);
	fill_flow(h, sk);
	child_inherit(h->cookie, h->netns, h->sport);
	attribute(h, NT_EV_STATE, 0); /* the owner map: the listener's owner, just inherited */
	h->ts_ns = c.ts_ns;
	h->cpu = c.cpu;
	h->ctx = c.ctx;
	if (!(cfg.providers & NT_PROV_TCP) || !pass(h))
		return;
	if (fold_state(sk, h, TCP_LISTEN, TCP_SYN_RECV))
		return;
	e = reserve(NT_EV_STATE);
	if (!e)
		return;
	__builtin_memcpy(&e->hdr, h, sizeof(*h));
	e->state.sk_err = 0;
	e->state.oldstate = TCP_LISTEN;
	e->state.newstate = TCP_SYN_RECV;
	e->state.flags = 0;
	e->state._pad = 0;
	submit(e);
}

/* X -> CLOSE: keep the tuple and counters, which a tcp_disconnect() zeroes right after. */
static __always_inline void closed_note(const struct sock *sk, const struct nt_header *h)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	struct nt_closed c = {};

	c.family = h->family;
	c.sport = h->sport;
	c.dport = h->dport;
	__builtin_memcpy(c.saddr, h->saddr, NT_ADDR_LEN);
	__builtin_memcpy(c.daddr, h->daddr, NT_ADDR_LEN);
	c.bytes_acked = BPF_CORE_READ(tp, bytes_acked);
	c.bytes_received = BPF_CORE_READ(tp, bytes_received);
	c.bytes_sent = BPF_CORE_READ(tp, bytes_sent);
	c.segs_in = BPF_CORE_READ(tp, segs_in);
	c.segs_out = BPF_CORE_READ(tp, segs_out);
	c.total_retrans = BPF_CORE_READ(tp, total_retrans);
	bpf_map_update_elem(&closed, &h->cookie, &c, BPF_ANY);
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

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(inet_sock_set_state, const struct sock *sk, const int oldstate, const int newstate)
{
	struct nt_header h = {};
	struct nt_event *e;
	bool task = in_task(ctx);
	__u8 how;

	if (BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP)
		return 0;
	if (oldstate == TCP_LISTEN && newstate == TCP_SYN_RECV) {
		child_cloned(sk, task); /* no cookie yet: see struct nt_child */
		return 0;
	}
	if (oldstate == TCP_SYN_RECV)
		child_born(sk);
	h.cookie = cookie_of(sk);
	if (newstate == TCP_ESTABLISHED && (cfg.providers & NT_PROV_SIFTR_POLL))
		poll_note(h.cookie);
	fill_flow(&h, sk);
	/* SYN_SENT too: a refused connect() ends in tcp_disconnect() as an abort does */
	if (newstate == TCP_CLOSE && oldstate != TCP_LISTEN)
		closed_note(sk, &h);
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
	if (fold_on() && fold_state_call(sk, &h, oldstate, newstate))
		return 0;
	e = reserve(NT_EV_STATE);
	if (!e)
		return 0;
	__builtin_memcpy(&e->hdr, &h, sizeof(h));
	e->state.sk_err = BPF_CORE_READ(sk, sk_err);
	e->state.oldstate = oldstate;
	e->state.newstate = newstate;
	e->state.flags = fin_received(sk, newstate) ? NT_STATE_FIN_RCVD : 0;
	e->state._pad = 0;
	submit(e);
	return 0;
}

/* err: the attempt's result, passed by newer kernels (6.18 here; 6.12 does not); older
 * ones have the 2-argument prototype and get tcp_retransmit_skb__2, err 0. */
static __always_inline void retransmit(void *ctx, const struct sock *sk, const struct sk_buff *skb, int err)
{
	const struct tcp_skb_cb *cb = (const struct tcp_skb_cb *)&skb->cb[0];
	struct nt_header h = {};
	struct nt_event *e = start(&h, sk, NT_EV_RETRANSMIT, in_task(ctx));

	if (!e)
		return;
	__builtin_memset(&e->retransmit, 0, sizeof(e->retransmit));
	e->retransmit.seq = BPF_CORE_READ(cb, seq);
	e->retransmit.end_seq = BPF_CORE_READ(cb, end_seq);
	e->retransmit.segs = BPF_CORE_READ(cb, tcp_gso_segs);
	e->retransmit.tcp_flags = BPF_CORE_READ(cb, tcp_flags);
	e->retransmit.err = err;
	e->retransmit.state = BPF_CORE_READ(sk, __sk_common.skc_state);
	e->retransmit.ca_state = BPF_CORE_READ_BITFIELD_PROBED((const struct inet_connection_sock *)sk, icsk_ca_state);
	/* the timer behind it: tcp_write_timer_handler() clears icsk_pending before an RTO's
	 * retransmission but only after a loss probe's, so it tells a TLP (user space names it) */
	e->retransmit.timer = BPF_CORE_READ((const struct inet_connection_sock *)sk, icsk_pending);
	fold_retrans(sk, e->hdr.ts_ns);
	submit(e);
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(tcp_retransmit_skb, const struct sock *sk, const struct sk_buff *skb, int err)
{
	retransmit(ctx, sk, skb, err);
	return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(tcp_retransmit_skb__2, const struct sock *sk, const struct sk_buff *skb)
{
	retransmit(ctx, sk, skb, 0);
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

/* reason (enum sk_rst_reason): 6.12 passes it, 6.1 does not (tcp_send_reset__2: 0). */
static __always_inline void send_reset(void *ctx, const struct sock *sk, const struct sk_buff *skb, __u32 reason)
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
		return;
	e = reserve(NT_EV_RESET);
	if (!e)
		return;
	__builtin_memcpy(&e->hdr, &h, sizeof(h));
	e->reset.reason = reason;
	e->reset.state = sk ? BPF_CORE_READ(sk, __sk_common.skc_state) : 0;
	e->reset.sender = 0;
	e->reset.active = skb ? 0 : 1;
	e->reset.has_sock = sk ? 1 : 0;
	fold_reset(sk, h.ts_ns, false, e->reset.state);
	submit(e);
}

SEC("tp_btf/tcp_send_reset")
int BPF_PROG(tcp_send_reset, const struct sock *sk, const struct sk_buff *skb, const enum sk_rst_reason reason)
{
	send_reset(ctx, sk, skb, reason);
	return 0;
}

SEC("tp_btf/tcp_send_reset")
int BPF_PROG(tcp_send_reset__2, const struct sock *sk, const struct sk_buff *skb)
{
	send_reset(ctx, sk, skb, 0);
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
	fold_reset(sk, e->hdr.ts_ns, true, e->reset.state);
	submit(e);
	return 0;
}

SEC("tp_btf/tcp_cong_state_set")
int BPF_PROG(tcp_cong_state_set, struct sock *sk, const __u8 ca_state)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	struct nt_header h = {};
	struct nt_event *e;
	__u32 cwnd, ssthresh, mss;
	__u8 old_ca;

	if (BPF_CORE_READ(sk, __sk_common.skc_state) == TCP_SYN_RECV)
		child_born(sk); /* a passive child's first event: before its SYN_RECV -> ESTABLISHED */
	/* start()'s steps, with the fold between the filters and the ring */
	h.cookie = cookie_of(sk);
	fill_flow(&h, sk);
	attribute(&h, NT_EV_CONG, in_task(ctx));
	if (!pass(&h))
		return 0;
	/* fires before icsk_ca_state is assigned: the field still holds the old state */
	old_ca = BPF_CORE_READ_BITFIELD_PROBED((const struct inet_connection_sock *)sk, icsk_ca_state);
	cwnd = BPF_CORE_READ(tp, snd_cwnd);
	ssthresh = BPF_CORE_READ(tp, snd_ssthresh);
	mss = BPF_CORE_READ(tp, mss_cache);
	if (fold_cong(sk, &h, old_ca, ca_state, cwnd, ssthresh, mss))
		return 0;
	e = reserve(NT_EV_CONG);
	if (!e)
		return 0;
	__builtin_memcpy(&e->hdr, &h, sizeof(h));
	e->cong.old_ca_state = old_ca;
	e->cong.new_ca_state = ca_state;
	e->cong.snd_cwnd = cwnd;
	e->cong.snd_ssthresh = ssthresh;
	e->cong.mss = mss;
	e->cong._pad[0] = e->cong._pad[1] = 0;
	submit(e);
	return 0;
}

SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(tcp_destroy_sock, struct sock *sk)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	struct nt_header h = {};
	struct nt_event *e;
	struct nt_flow *f = NULL, *slot = NULL;
	struct nt_owner *o;
	struct nt_closed *c;
	struct nt_fold *fold = NULL;
	bool task = in_task(ctx);
	bool has_flow = false;

	h.cookie = cookie_of(sk);
	fill_flow(&h, sk);
	attribute(&h, NT_EV_DESTROY, task);
	if (fold_on()) { /* a socket that still folds ends in one NT_EV_LIFECYCLE */
		fold = bpf_sk_storage_get(&folds, sk, NULL, 0);
		if (fold && fold->streaming)
			fold = NULL;
	}
	/* disconnected: tcp_disconnect() zeroed the counters; those it closed with */
	c = BPF_CORE_READ(sk, __sk_common.skc_dport) ? NULL : bpf_map_lookup_elem(&closed, &h.cookie);
	o = bpf_map_lookup_elem(&owners, &h.cookie);
	if (cfg.providers & (NT_PROV_SIFTR | NT_PROV_SIFTR_POLL)) {
		slot = flow_slot(h.cookie);
		if (slot && slot->flow_cookie != h.cookie)
			slot = NULL;
	}
	if (pass(&h)) {
		if (cfg.providers & (NT_PROV_SIFTR | NT_PROV_SIFTR_POLL)) {
			f = slot ?: bpf_map_lookup_elem(&flows, &h.cookie);
			/* established, never polled: its counts all the same */
			has_flow = f || ((cfg.providers & NT_PROV_SIFTR_POLL) && bpf_map_lookup_elem(&polled, &h.cookie) &&
					 !bpf_map_lookup_elem(&flows_out, &h.cookie));
			if (has_flow && !fold)
				emit_flow_final(&h, f, sk, c);
		}
		if (cfg.providers & NT_PROV_TCPDEBUG)
			debug_point(sk, h.cookie, NULL, NT_TA_USER, PRU_DETACH, 0, 0, NULL, task);
		if (fold)
			fold_emit(sk, &h, fold, c, o, f, has_flow, 0);
		else if ((cfg.providers & NT_PROV_TCP) && (e = reserve(NT_EV_DESTROY))) {
			__builtin_memcpy(&e->hdr, &h, sizeof(h));
			e->destroy.bytes_acked = c ? c->bytes_acked : BPF_CORE_READ(tp, bytes_acked);
			e->destroy.bytes_received = c ? c->bytes_received : BPF_CORE_READ(tp, bytes_received);
			e->destroy.first_ns = o ? o->first_ns : 0;
			e->destroy.segs_in = c ? c->segs_in : BPF_CORE_READ(tp, segs_in);
			e->destroy.segs_out = c ? c->segs_out : BPF_CORE_READ(tp, segs_out);
			e->destroy.total_retrans = c ? c->total_retrans : BPF_CORE_READ(tp, total_retrans);
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
	if (cfg.providers & NT_PROV_SIFTR_POLL)
		bpf_map_delete_elem(&polled, &h.cookie);
	bpf_map_delete_elem(&owners, &h.cookie);
	bpf_map_delete_elem(&closed, &h.cookie);
	__sync_fetch_and_add(&owner_epoch, 1); /* also retires hints naming this socket's address */
	return 0;
}

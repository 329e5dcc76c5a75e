/* SPDX-License-Identifier: GPL-2.0 */
/* fold.bpf.h: tcp --tcp-fold (docs/record-path.md, step 2; docs/collector.md, "Folded
 * connections"). A socket's state changes and congestion-state changes are kept in its
 * own socket storage (struct nt_fold, nettrail.h) instead of going to the ring one by one,
 * and leave as one NT_EV_LIFECYCLE event: at tcp_destroy_sock with the final counters
 * (tcp.bpf.c), or from siftr-poll's iterator once the socket is older than the fold
 * window (siftr_poll.bpf.c, partial), after which the socket streams as without the fold.
 * A fold that fills up (NT_FOLD_STATES changes) is flushed the same way. Retransmissions
 * and resets are never folded: they stay records of their own, and the fold counts them
 * (fold_retrans, fold_reset: how many, the first and last times, the last reset's side
 * and state).
 *
 * Socket storage in tracing programs (bpf_sk_storage_get from tp_btf and iter) came with
 * Linux 5.11; the collector turns the fold off before that, with its reason in
 * collector_status.degraded (collector/bpf/loader.py, fold_unusable). cfg.fold_window_ms
 * is 0 then and the verifier drops every path below.
 *
 * tcp.bpf.c defines NT_FOLD_DEFINE before including this header and so holds the map's
 * one definition; siftr_poll.bpf.c declares it extern (as maps.bpf.h does for the others).
 * Keep in sync with: translators/tcp_lifecycle.py (what each field means to a record).
 */
#ifndef __NT_FOLD_BPF_H
#define __NT_FOLD_BPF_H

#include "attribution.bpf.h"

#ifdef NT_FOLD_DEFINE
#define NT_FOLD_MAP
#else
#define NT_FOLD_MAP extern
#endif

/* Freed with the socket: nothing to delete at tcp_destroy_sock, nothing left by a socket
 * whose end was not seen. */
NT_FOLD_MAP struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct nt_fold);
} folds SEC(".maps");

/* fold_poll()'s header: siftr_poll's frame and its subprograms' are near the 512 bytes the
 * verifier allows them together, so it lives here, not on the stack (as child_header). */
NT_FOLD_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nt_header);
} fold_header SEC(".maps");

static __always_inline bool fold_on(void)
{
	return cfg.fold_window_ms && (cfg.providers & NT_PROV_TCP);
}

/* Microseconds from the fold's birth to ts (0 for an event stamped before it: the
 * deferred LISTEN -> SYN_RECV of a passive child is folded with its own, earlier time,
 * and two CPUs' clocks may differ by a little). */
static __always_inline __u32 fold_us(const struct nt_fold *f, __u64 ts)
{
	return ts > f->born_ns ? (__u32)((ts - f->born_ns) / 1000) : 0;
}

/* The fold of a socket that still folds (created at its first change), or NULL: the fold
 * is off, the socket streams, or its storage could not be had (a socket going away). */
static __always_inline struct nt_fold *fold_get(const struct sock *sk, __u64 ts)
{
	struct nt_fold *f;

	if (!fold_on())
		return NULL;
	f = bpf_sk_storage_get(&folds, (void *)sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (!f || f->streaming)
		return NULL;
	if (!f->born_ns)
		f->born_ns = ts ?: 1;
	return f;
}

/* One NT_EV_LIFECYCLE from the fold and the socket's counters: `c` what it held at its
 * change to CLOSE (tcp_disconnect() zeroes them after it), `flow` siftr's flow when
 * `has_flow`, NULL with has_flow: an established socket siftr-poll never sampled. */
static __always_inline void fold_emit(const struct sock *sk, const struct nt_header *h, const struct nt_fold *f,
				      const struct nt_closed *c, const struct nt_owner *o, const struct nt_flow *flow,
				      bool has_flow, __u8 partial)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	struct nt_event *e = reserve(NT_EV_LIFECYCLE);
	struct nt_lifecycle_body *b;

	if (!e)
		return;
	__builtin_memcpy(&e->hdr, h, sizeof(*h));
	e->hdr.type = NT_EV_LIFECYCLE;
	b = &e->lifecycle;
	__builtin_memcpy(&b->fold, f, sizeof(*f));
	b->bytes_acked = c ? c->bytes_acked : BPF_CORE_READ(tp, bytes_acked);
	b->bytes_received = c ? c->bytes_received : BPF_CORE_READ(tp, bytes_received);
	b->bytes_sent = c ? c->bytes_sent : BPF_CORE_READ(tp, bytes_sent);
	b->segs_in = c ? c->segs_in : BPF_CORE_READ(tp, segs_in);
	b->segs_out = c ? c->segs_out : BPF_CORE_READ(tp, segs_out);
	b->total_retrans = c ? c->total_retrans : BPF_CORE_READ(tp, total_retrans);
	b->first_ns = o ? o->first_ns : 0;
	b->flow_samples = flow ? flow->samples : 0;
	/* as emit_flow_final (siftr.bpf.h): without per-packet siftr a flow stands for its segments */
	if (!(cfg.providers & NT_PROV_SIFTR))
		b->flow_skbs = has_flow ? (__u64)b->segs_in + b->segs_out : 0;
	else
		b->flow_skbs = flow ? flow->skbs : 0;
	b->state = BPF_CORE_READ(sk, __sk_common.skc_state);
	b->partial = partial;
	b->has_flow = has_flow;
	b->_pad_tail = 0;
	submit(e);
}

/* A state change that passed the filters: true when it was folded (no event of its own).
 * A full fold is flushed (partial) and the socket streams from this change on. */
static __always_inline bool fold_state(const struct sock *sk, const struct nt_header *h, int oldstate, int newstate)
{
	struct nt_fold *f = fold_get(sk, h->ts_ns);
	__u32 n;

	if (!f)
		return false;
	n = f->nstates;
	if (n >= NT_FOLD_STATES) {
		fold_emit(sk, h, f, NULL, bpf_map_lookup_elem(&owners, &h->cookie), NULL, false, 1);
		f->streaming = 1;
		return false;
	}
	if (!n)
		f->first_old = oldstate;
	f->state_us[n] = fold_us(f, h->ts_ns);
	f->states[n] = (newstate & NT_FOLD_STATE) | (h->ctx == NT_CTX_TASK ? NT_FOLD_TASK : 0) |
		       (BPF_CORE_READ(sk, sk_err) ? NT_FOLD_ERR : 0) | (fin_received(sk, newstate) ? NT_FOLD_FIN : 0);
	f->nstates = n + 1;
	return true;
}

/* fold_state() as a subprogram of its own, for inet_sock_set_state: its frame is the
 * largest of the object, and before 6.14 the verifier counts a chain of calls' frames
 * together against 512 bytes (inet_sock_set_state + child_born must fit). */
static __noinline bool fold_state_call(const struct sock *sk, const struct nt_header *h, int oldstate, int newstate)
{
	return fold_state(sk, h, oldstate, newstate);
}

/* A congestion-state change that passed the filters: true when it was folded. */
static __always_inline bool fold_cong(const struct sock *sk, const struct nt_header *h, __u8 old_ca, __u8 new_ca,
				      __u32 cwnd, __u32 ssthresh, __u32 mss)
{
	struct nt_fold *f = fold_get(sk, h->ts_ns);

	if (!f)
		return false;
	if (!f->cong_changes)
		f->first_ca = old_ca;
	f->cong_changes++;
	f->cong_us = fold_us(f, h->ts_ns);
	f->last_old_ca = old_ca;
	f->last_ca = new_ca;
	f->cong_ctx = h->ctx;
	f->cong_at = f->nstates; /* its place among the state changes: the same microsecond may hold both */
	f->snd_cwnd = cwnd;
	f->snd_ssthresh = ssthresh;
	f->mss = mss;
	return true;
}

/* The fold of a socket that folds, never created here (a reset or a retransmission of a
 * socket with no change folded yet is its own record only), or NULL. */
static __always_inline struct nt_fold *fold_peek(const struct sock *sk)
{
	struct nt_fold *f;

	if (!fold_on() || !sk)
		return NULL;
	f = bpf_sk_storage_get(&folds, (void *)sk, NULL, 0);
	return f && !f->streaming && f->born_ns ? f : NULL;
}

/* A retransmission that passed the filters (it is also a record of its own). */
static __always_inline void fold_retrans(const struct sock *sk, __u64 ts)
{
	struct nt_fold *f = fold_peek(sk);

	if (!f)
		return;
	if (!f->retrans)
		f->retrans_first_us = fold_us(f, ts);
	if (f->retrans < 0xffff)
		f->retrans++;
	f->retrans_last_us = fold_us(f, ts);
}

/* A reset sent (peer 0) or received (peer 1) that passed the filters (also its own record). */
static __always_inline void fold_reset(const struct sock *sk, __u64 ts, bool peer, __u8 state)
{
	struct nt_fold *f = fold_peek(sk);

	if (!f)
		return;
	if (f->resets < 0xff)
		f->resets++;
	f->reset_how = (peer ? NT_FOLD_RST_PEER : 0) | (state & NT_FOLD_STATE);
	f->reset_us = fold_us(f, ts);
}

/* siftr-poll's visit of a full socket: a fold older than the window is flushed (partial)
 * and the socket streams from then on, so a long connection is seen while it lives. */
static __noinline void fold_poll(const struct sock *sk)
{
	struct nt_fold *f;
	struct nt_header *h;
	__u32 zero = 0;
	__u64 now;

	if (!fold_on())
		return;
	f = bpf_sk_storage_get(&folds, (void *)sk, NULL, 0);
	if (!f || f->streaming || !f->born_ns)
		return;
	now = bpf_ktime_get_ns();
	if (now - f->born_ns < (__u64)cfg.fold_window_ms * 1000000)
		return;
	h = bpf_map_lookup_elem(&fold_header, &zero);
	if (!h)
		return;
	__builtin_memset(h, 0, sizeof(*h));
	h->cookie = cookie_of(sk);
	fill_flow(h, sk);
	attribute(h, NT_EV_LIFECYCLE, 0);
	h->ctx = NT_CTX_UNKNOWN; /* no packet, no call: a poll */
	if (pass(h))
		fold_emit(sk, h, f, NULL, bpf_map_lookup_elem(&owners, &h->cookie), NULL, false, 1);
	f->streaming = 1; /* after the copy: the record shows the fold as it was */
}

#endif /* __NT_FOLD_BPF_H */

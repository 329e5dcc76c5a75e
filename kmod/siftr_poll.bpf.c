// SPDX-License-Identifier: GPL-2.0
/* siftr_poll.bpf.c: siftr's always-on mode, siftr-poll (providers.md 6): no program on
 * any packet's path. The collector runs this iterator over the TCP sockets of each
 * network namespace every interval (collector/bpf/poll.py); for each full socket in a
 * state siftr samples it emits a siftr sample of the control block (direction 2,
 * "poll") when anything in it moved since the socket's last sample or data waits on
 * either side (a stalled window), and copies the socket's own counters into its flow,
 * so the exact per-flow counts (the flows map's reads, the final record at
 * tcp_destroy_sock) are kept as with per-packet siftr. With --tcp-fold it is also the fold
 * window's clock: a socket folded longer than the window is flushed here (fold.bpf.h);
 * without siftr-poll the collector runs it for that alone (collector/bpf/source.py).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "nettrail.h"
#include "attribution.bpf.h"
#include "siftr.bpf.h"
#include "fold.bpf.h"

/* The socket's values a sample is judged by, read afresh; true when any moved. */
static __always_inline bool poll_moved(struct nt_polled *now, const struct nt_polled *last, const struct tcp_sock *tp,
				       __u8 state)
{
	now->snd_una = NT_RD(tp, snd_una);
	now->snd_nxt = NT_RD(tp, snd_nxt);
	now->rcv_nxt = NT_RD(tp, rcv_nxt);
	now->snd_cwnd = NT_RD(tp, snd_cwnd);
	now->snd_wnd = NT_RD(tp, snd_wnd);
	now->rcv_wnd = NT_RD(tp, rcv_wnd);
	now->srtt_us = NT_RD(tp, srtt_us);
	now->state = state;
	now->ca_state = NT_RD_BITFIELD(&tp->inet_conn, icsk_ca_state);
	now->sampled = 1;
	return !last->sampled || now->snd_una != last->snd_una || now->snd_nxt != last->snd_nxt ||
	       now->rcv_nxt != last->rcv_nxt || now->snd_cwnd != last->snd_cwnd || now->snd_wnd != last->snd_wnd ||
	       now->rcv_wnd != last->rcv_wnd || now->srtt_us != last->srtt_us || now->state != last->state ||
	       now->ca_state != last->ca_state;
}

SEC("iter/tcp")
int siftr_poll(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct nt_polled now = {}, fresh = {}, *last;
	struct tcp_sock *full;
	const struct tcp_sock *tp;
	const struct sock *sk;
	struct nt_header h = {};
	struct nt_event *e;
	struct nt_flow *f;
	bool waiting;
	__u8 state;

	if (!skc)
		return 0;
	full = bpf_skc_to_tcp_sock(skc); /* NULL for a request or TIME-WAIT socket */
	if (!full)
		return 0;
	sk = (const struct sock *)full;
	fold_poll(sk); /* --tcp-fold's clock: every full socket, whatever its state */
	if (!(cfg.providers & NT_PROV_SIFTR_POLL))
		return 0; /* run for the fold alone (tcp --tcp-fold without siftr-poll): no samples */
	tp = NT_CAST(sk, struct tcp_sock);
	state = NT_RD(tp, inet_conn.icsk_inet.sk.__sk_common.skc_state);
	if (!siftr_out_state(state))
		return 0;
	h.cookie = cookie_of(sk);
	last = bpf_map_lookup_elem(&polled, &h.cookie);
	if (!last) {
		bpf_map_update_elem(&polled, &h.cookie, &fresh, BPF_NOEXIST);
		last = bpf_map_lookup_elem(&polled, &h.cookie);
		if (!last)
			return 0;
	}
	f = flow_find(h.cookie);
	if (!f && (!flow_admit_polled(sk, h.cookie) || !(f = flow_find(h.cookie))))
		return 0;
	flow_copy(f, sk, true);
	flow_copy(f, sk, false);
	/* what the samples stand for (H2): the socket's segments, unless per-packet siftr counts buffers */
	if (!(cfg.providers & NT_PROV_SIFTR))
		f->skbs = (__u64)f->packets_in + f->packets_out;
	/* data written and not yet acknowledged, or received and not yet read */
	waiting = NT_RD(tp, write_seq) != NT_RD(tp, snd_una) || NT_RD(tp, rcv_nxt) != NT_RD(tp, copied_seq);
	if (!poll_moved(&now, last, tp, state) && !waiting)
		return 0;
	__builtin_memcpy(last, &now, sizeof(now));
	fill_flow(&h, sk);
	attribute(&h, NT_EV_SIFTR, 0);
	h.ctx = NT_CTX_UNKNOWN; /* no packet, no context: a poll */
	if (!pass(&h))
		return 0;
	f->samples++;
	f->last_ns = h.ts_ns;
	e = reserve(NT_EV_SIFTR);
	if (!e)
		return 0;
	__builtin_memcpy(&e->hdr, &h, sizeof(h));
	snapshot(&e->siftr.snap, sk);
	e->siftr.th_seq = 0;
	e->siftr.th_ack = 0;
	e->siftr.data_sz = 0;
	e->siftr.direction = 2;
	e->siftr._pad_tail[0] = e->siftr._pad_tail[1] = e->siftr._pad_tail[2] = 0;
	submit(e);
	return 0;
}

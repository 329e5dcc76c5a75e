/* SPDX-License-Identifier: GPL-2.0 */
/* tcpdebug.bpf.h: the tcpdebug provider (providers.md 5), FreeBSD's TCPDEBUG trace
 * points with the socket's control block: input (tcp_probe), output (net_dev_queue),
 * user requests (state changes, send and receive calls, close) and drops (kfree_skb
 * with a TCP_* reason, the reasons chosen in cfg.drop_reasons).
 *
 * tcpdebug has no tracepoint of its own, so no .bpf.c: each point rides on a program
 * another provider needs anyway (siftr.bpf.c, ip.bpf.c, tcp.bpf.c, attribution.bpf.c,
 * skb.bpf.c), which calls debug_point() or debug_drop() when cfg.providers has
 * NT_PROV_TCPDEBUG.
 */
#ifndef __NT_TCPDEBUG_BPF_H
#define __NT_TCPDEBUG_BPF_H

#include "attribution.bpf.h"
#include "snapshot.bpf.h"

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

/* rx_skb: the segment to take the 4-tuple from when there is no socket (drop). */
/* from: where a user point's call was seen (NT_DEBUG_HOOK_*; user_call.bpf.h). */
static __always_inline void debug_record(const struct sock *sk, __u64 cookie, const struct seg *g, __u8 dir,
					  __u8 prureq, __u8 approx, __u32 reason, const struct sk_buff *rx_skb, __u8 task,
					  __u8 from)
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
	e->debug.user_hook = from;
	submit(e);
}

static __always_inline void debug_point(const struct sock *sk, __u64 cookie, const struct seg *g, __u8 dir,
					 __u8 prureq, __u8 approx, __u32 reason, const struct sk_buff *rx_skb, __u8 task)
{
	debug_record(sk, cookie, g, dir, prureq, approx, reason, rx_skb, task, NT_DEBUG_HOOK_TP);
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
	seg_at_drop(&g, skb);
	debug_point(sk, cookie_read(sk), &g, NT_TA_DROP, PRU_NONE, 0, r, skb, task);
}

#endif /* __NT_TCPDEBUG_BPF_H */

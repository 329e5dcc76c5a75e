/* SPDX-License-Identifier: GPL-2.0 */
/* siftr.bpf.h: the siftr provider's flow state (providers.md 6): exact per-flow packet
 * and byte counts, and every ppl-th packet of a flow sampled with the control block,
 * as FreeBSD's SIFTR does. Its packets come from tcp_probe (input, siftr.bpf.c) and
 * net_dev_queue (output, ip.bpf.c); the counts are the socket's own tcp_info counters
 * (segs_in/out, bytes_received/sent, as `ss -tin` shows them), copied at each packet;
 * tcp_destroy_sock (tcp.bpf.c) emits a flow's final counts and frees its slot.
 */
#ifndef __NT_SIFTR_BPF_H
#define __NT_SIFTR_BPF_H

#include "attribution.bpf.h"
#include "snapshot.bpf.h"

static __always_inline struct nt_flow *flow_slot(__u64 cookie)
{
#ifdef NT_LEGACY
	return NULL; /* no compare-and-swap to claim a slot with (core_fixes.bpf.h): `flows` only */
#else
	__u32 i = cookie & (NT_FLOW_SLOTS - 1);

	return bpf_map_lookup_elem(&flow_slots, &i);
#endif
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
static __always_inline int flow_admit_as(const struct sock *sk, __u64 cookie, __u8 how)
{
	struct nt_header h = { .cookie = cookie };
	struct nt_flow init = {}, *slot;
	__u8 no = 1;

	if (bpf_map_lookup_elem(&flows_out, &cookie))
		return 0;
	fill_flow(&h, sk);
	attribute(&h, NT_EV_SIFTR, how);
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

/* Out of line, each with its own frame: before 6.14 the verifier adds a call chain's frames
 * against 512 bytes, so what the attribution needs (in_task()'s reads included) stays in
 * here, not in tcp_probe's or net_dev_queue's frame. */
static __noinline int flow_admit(const struct sock *sk, __u64 cookie, void *ctx)
{
	return flow_admit_as(sk, cookie, in_task(ctx));
}

/* siftr-poll's (siftr_poll.bpf.c): the poll runs in the collector's task, not the socket
 * user's, so the owner comes from the owner map (how 0). */
static __noinline int flow_admit_polled(const struct sock *sk, __u64 cookie)
{
	return flow_admit_as(sk, cookie, 0);
}

/* siftr-poll: the socket reached ESTABLISHED (an entry in `polled`, which its first poll
 * fills), so that one destroyed before any poll still gets its final counts. Out of line:
 * inet_sock_set_state's frame stays as it was. */
static __noinline void poll_note(__u64 cookie)
{
	struct nt_polled fresh = {};

	bpf_map_update_elem(&polled, &cookie, &fresh, BPF_NOEXIST);
}

/* While the ring is half full, one sample of a flow in this many nanoseconds at most. */
#define NT_PRESSED_GAP_NS 10000000ULL

#ifdef NT_COMPAT
/* The compat object (before 6.2, core_fixes.bpf.h) has no read-only cast, and
 * bpf_skc_to_tcp_sock() refuses skb->sk where the object is also loaded (6.2+ tags it
 * RCU), so probe reads, as many per packet as counting the payload took before: input
 * one, output one for the three counters together. Up to 6.1, bytes_received, segs_out
 * and bytes_sent lie in one 48-byte run of tcp_sock (CO-RE gives each offset; a layout
 * where they do not takes a read each). */
#define NT_COUNTER_RUN 48

static __always_inline void flow_copy(struct nt_flow *f, const struct sock *sk, bool out)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	__u32 lo = bpf_core_field_offset(struct tcp_sock, bytes_received);
	__u32 so = bpf_core_field_offset(struct tcp_sock, segs_out);
	__u32 bs = bpf_core_field_offset(struct tcp_sock, bytes_sent);
	__u64 run[NT_COUNTER_RUN / 8];

	if (!out) {
		f->packets_in = BPF_CORE_READ(tp, segs_in);
		return;
	}
	if (so > lo && so + 4 <= lo + NT_COUNTER_RUN && bs > lo && bs + 8 <= lo + NT_COUNTER_RUN) {
		if (bpf_probe_read_kernel(run, sizeof(run), (const char *)sk + lo))
			return;
		f->bytes_in = run[0];
		f->packets_out = *(__u32 *)((char *)run + (so - lo));
		f->bytes_out = *(__u64 *)((char *)run + (bs - lo));
		return;
	}
	f->packets_out = BPF_CORE_READ(tp, segs_out);
	f->bytes_out = BPF_CORE_READ(tp, bytes_sent);
	f->bytes_in = BPF_CORE_READ(tp, bytes_received);
}
#else
/* Direct loads through a read-only cast (a register move once verified). */
static __always_inline void flow_copy(struct nt_flow *f, const struct sock *sk, bool out)
{
	const struct tcp_sock *tp = NT_CAST(sk, struct tcp_sock);

	if (out) {
		f->packets_out = tp->segs_out;
		f->bytes_out = tp->bytes_sent;
		f->bytes_in = tp->bytes_received;
	} else {
		f->packets_in = tp->segs_in;
	}
}
#endif

/* Copy the socket's own counters into the flow; true if this buffer is the flow's ppl-th.
 * The counters are the kernel's (what tcp_info and `ss -tin` report): segs_in counts
 * max(1, gso_segs) of each received skb in tcp_v4_rcv/tcp_v6_rcv before tcp_probe fires,
 * segs_out and bytes_sent are added in __tcp_transmit_skb before the skb reaches
 * net_dev_queue, and bytes_received is rcv_nxt's advance, so a GRO or GSO buffer counts
 * its segments and a duplicate segment no bytes. Each side copies what has moved by then:
 * input its segs_in (bytes_received moves only after tcp_probe, while the segment is
 * processed), output segs_out, bytes_sent and bytes_received (the ACK that follows
 * received data carries its advance). No arithmetic and no packet header read: loads of
 * tcp_sock lines the kernel has just written, stores into the flow's one cache line.
 * Plain stores, not atomics: a socket's segments are handled under its lock (tcp_probe in
 * tcp_rcv_established, net_dev_queue in tcp_transmit_skb), so one flow's copies never
 * race. No clock read: last_ns is the last sample's time. */
static __always_inline bool flow_count(struct nt_flow *f, const struct sock *sk, bool out)
{
	__u64 seen = f->skbs++;

	flow_copy(f, sk, out);
	if (nth_missed(seen, cfg.ppl))
		return false;
	f->samples++;
	return true;
}

/* The sampled packet's record, out of line: the per-packet path stays short and its
 * code compact (on loopback every other segment copy evicts the caches, so what a
 * program costs is mostly the cache lines it touches, its own code included). The
 * segment's header is found here, for samples only: input at skb->data
 * (tcp_rcv_established), output at the transport header. */
static __noinline void siftr_emit(const struct sock *sk, struct nt_flow *f, const struct sk_buff *skb, __u8 dir,
				  void *ctx)
{
	struct nt_header h = {};
	struct nt_event *e;
	struct seg g = {};
	struct seg_ref r;

	h.cookie = sk->__sk_common.skc_cookie.counter;
	fill_flow(&h, sk);
	attribute(&h, NT_EV_SIFTR, in_task(ctx));
	if (!pass(&h)) {
		f->last_ns = h.ts_ns;
		return; /* the owner changed since the flow was admitted */
	}
	/* A reader half a ring behind gets at most one sample of a flow every
	 * NT_PRESSED_GAP_NS: the bulk transfer that filled the ring gives way, and a slow
	 * flow (a stalled window, a trickle) keeps its samples. Given-up samples are lost,
	 * counted as such. */
	if (h.ts_ns - f->last_ns < NT_PRESSED_GAP_NS && ring_pressed()) {
		refuse(NT_EV_SIFTR);
		return;
	}
	f->last_ns = h.ts_ns;
	e = reserve(NT_EV_SIFTR);
	if (!e)
		return;
	__builtin_memcpy(&e->hdr, &h, sizeof(h));
	snapshot(&e->siftr.snap, sk);
	if (dir) {
		r = seg_ref_at_transport(skb);
	} else {
		r.th = (const struct tcphdr *)skb->data;
		r.hdr_to_end = skb->len;
	}
	read_seg(&g, &r);
	e->siftr.th_seq = g.seq;
	e->siftr.th_ack = g.ack;
	e->siftr.data_sz = g.payload;
	e->siftr.direction = dir;
	submit(e);
}

static __always_inline void siftr_packet(const struct sock *sk, __u64 cookie, const struct sk_buff *skb, __u8 dir,
					 void *ctx)
{
	struct nt_flow *f = flow_find(cookie);

	if (!f && (!flow_admit(sk, cookie, ctx) || !(f = flow_find(cookie))))
		return;
	if (flow_count(f, sk, dir == 1))
		siftr_emit(sk, f, skb, dir, ctx);
}

/* The flow's final record at tcp_destroy_sock: its counters read from the socket once
 * more (segments it handled in states siftr does not watch, a last ACK, are in them), or,
 * after a tcp_disconnect() zeroed them, what it held at its change to CLOSE (c). f NULL:
 * a socket siftr-poll never polled (it lived less than an interval): no samples, the
 * counters all the same. With siftr-poll alone, `skbs` is the segments in and out. */
static __always_inline void emit_flow_final(const struct nt_header *h, const struct nt_flow *f,
					    const struct sock *sk, const struct nt_closed *c)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	struct nt_event *e = reserve(NT_EV_FLOW);

	if (!e)
		return;
	__builtin_memcpy(&e->hdr, h, sizeof(*h));
	e->hdr.type = NT_EV_FLOW;
	if (f) {
		__builtin_memcpy(&e->flow, f, sizeof(*f));
	} else {
		__builtin_memset(&e->flow, 0, sizeof(e->flow));
		e->flow.flow_cookie = h->cookie;
	}
	if (c) {
		e->flow.packets_in = c->segs_in;
		e->flow.packets_out = c->segs_out;
		e->flow.bytes_in = c->bytes_received;
		e->flow.bytes_out = c->bytes_sent;
	} else {
		e->flow.packets_in = BPF_CORE_READ(tp, segs_in);
		e->flow.packets_out = BPF_CORE_READ(tp, segs_out);
		e->flow.bytes_in = BPF_CORE_READ(tp, bytes_received);
		e->flow.bytes_out = BPF_CORE_READ(tp, bytes_sent);
	}
	if (!(cfg.providers & NT_PROV_SIFTR))
		e->flow.skbs = (__u64)e->flow.packets_in + e->flow.packets_out;
	submit(e);
}

static __always_inline bool siftr_out_state(__u8 st)
{
	return st == TCP_ESTABLISHED || st == TCP_CLOSE_WAIT || st == TCP_FIN_WAIT1 || st == TCP_FIN_WAIT2 ||
	       st == TCP_CLOSING || st == TCP_LAST_ACK;
}

#endif /* __NT_SIFTR_BPF_H */

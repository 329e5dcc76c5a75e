/* SPDX-License-Identifier: GPL-2.0 */
/* siftr.bpf.h: the siftr provider's flow state (providers.md 6): exact per-flow packet
 * and byte counts, and every ppl-th packet of a flow sampled with the control block,
 * as FreeBSD's SIFTR does. Its packets come from tcp_probe (input, siftr.bpf.c) and
 * net_dev_queue (output, ip.bpf.c); tcp_destroy_sock (tcp.bpf.c) emits a flow's final
 * counts and frees its slot.
 */
#ifndef __NT_SIFTR_BPF_H
#define __NT_SIFTR_BPF_H

#include "attribution.bpf.h"
#include "snapshot.bpf.h"

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

static __always_inline bool siftr_out_state(__u8 st)
{
	return st == TCP_ESTABLISHED || st == TCP_CLOSE_WAIT || st == TCP_FIN_WAIT1 || st == TCP_FIN_WAIT2 ||
	       st == TCP_CLOSING || st == TCP_LAST_ACK;
}

#endif /* __NT_SIFTR_BPF_H */

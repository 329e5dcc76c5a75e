// SPDX-License-Identifier: GPL-2.0
/* skb.bpf.c: the skb provider (providers.md 7): drops with their reason and location
 * (kfree_skb, the always-on "skb" mode, counted exactly in `drops`), and, for
 * "skb-lifecycle", each buffer's stages from its first sighting to its end: receive
 * entry hooks, transmit start and done, the copy to user space and the consume.
 * A buffer's first sighting at net_dev_queue or netif_receive_skb is in ip.bpf.c, the
 * consumes inferred at a receive call's return in attribution.bpf.c (skb.bpf.h).
 * kfree_skb also carries tcpdebug's drop point.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "nettrail.h"
#include "attribution.bpf.h"
#include "skb.bpf.h"
#include "tcpdebug.bpf.h"

/* Receive entry hooks (providers.md 7.2, whichever first): they see a buffer before GRO
 * and before netif_receive_skb, so a received lifetime starts there. Not on loopback:
 * every buffer it receives was sent on this host, first seen at net_dev_queue, and an
 * entry hook gives such a buffer no stage (skb_first_at), so it returns before any
 * lookup (loopback's __netif_rx fires netif_rx_entry for every packet). */
static __always_inline void skb_rx_entry(const struct sk_buff *skb, __u8 first, void *ctx)
{
	__u16 proto = bpf_ntohs(skb->protocol);

	if (!(cfg.providers & NT_PROV_SKB_LIFE) || (proto != ETH_P_IP && proto != ETH_P_IPV6))
		return;
	if (skb->dev->flags & IFF_LOOPBACK)
		return;
	skb_first_at(skb, NULL, true, first, ctx);
}

SEC("tp_btf/napi_gro_receive_entry")
int BPF_PROG(napi_gro_receive_entry, const struct sk_buff *skb)
{
	skb_rx_entry(skb, NT_SKB_RX_FIRST_GRO, ctx);
	return 0;
}

SEC("tp_btf/netif_rx_entry")
int BPF_PROG(netif_rx_entry, const struct sk_buff *skb)
{
	skb_rx_entry(skb, NT_SKB_RX_FIRST_NETIF, ctx);
	return 0;
}

SEC("tp_btf/netif_receive_skb_entry")
int BPF_PROG(netif_receive_skb_entry, const struct sk_buff *skb)
{
	skb_rx_entry(skb, NT_SKB_RX_FIRST_ENTRY, ctx);
	return 0;
}

/* A later stage of a tracked buffer; untracked (filtered out, not followed, or older)
 * ones are ignored, and whether the context is a task is found out only for a stage. */
static __always_inline void skb_later_at(const struct sk_buff *skb, __u64 addr, __u8 stage, __u8 end, __s32 rc,
					 void *ctx)
{
	struct nt_skb_id *id;
	__u64 now;
	bool task;

	id = bpf_map_lookup_elem(&skbs, &addr);
	if (!id)
		return;
	task = in_task(ctx);
	now = bpf_ktime_get_ns();
	if (id->head != (__u64)skb->head) {
		/* Another buffer at the address, one no first-sighting hook saw (an AF_UNIX
		 * message, or a buffer the filters left out): the lifetime ended unseen. */
		skb_emit_as(id, id->last_len, skb_id_protocol(id), NT_SKB_LAST_SEEN, SKB_END_LAST_SEEN, 0, now, task);
		skb_id_drop(addr);
		return;
	}
	if ((stage == NT_SKB_XMIT_START || stage == NT_SKB_XMIT) && !skb_was_sent(id->last_stage))
		return; /* veth: the peer's receive entry hook ran inside its sender's xmit */
	skb_emit(id, skb, stage, end, rc, now, task);
	if (end) {
		skb_id_drop(addr);
		return;
	}
	id->prev_ns = now;
	id->last_stage = stage;
}

static __always_inline void skb_later(const struct sk_buff *skb, __u8 stage, __u8 end, __s32 rc, void *ctx)
{
	__u64 addr = skb_key(skb);

	if (skb_maybe_followed(addr))
		skb_later_at(skb, addr, stage, end, rc, ctx);
}

SEC("tp_btf/net_dev_start_xmit")
int BPF_PROG(net_dev_start_xmit, const struct sk_buff *skb, const struct net_device *dev)
{
	skb_later(skb, NT_SKB_XMIT_START, 0, 0, ctx);
	return 0;
}

SEC("tp_btf/net_dev_xmit")
int BPF_PROG(net_dev_xmit, struct sk_buff *skb, int rc, struct net_device *dev, unsigned int len)
{
	skb_later(skb, NT_SKB_XMIT, 0, rc, ctx);
	return 0;
}

static __always_inline void skb_read_note(const struct sk_buff *skb, int len)
{
	__u64 addr = skb_key(skb);
	__u32 tid = (__u32)bpf_get_current_pid_tgid(), zero = 0, n;
	struct nt_skb_id *id = bpf_map_lookup_elem(&skbs, &addr);
	struct nt_skb_reads *rs, *z;
	struct nt_skb_follow *f;

	if (!id)
		return;
	rs = bpf_map_lookup_elem(&skb_reads, &tid);
	if (!rs) {
		z = bpf_map_lookup_elem(&skb_reads_zero, &zero);
		if (!z || bpf_map_update_elem(&skb_reads, &tid, z, BPF_NOEXIST))
			return;
		if ((f = skb_follow_map())) /* counted before the receive call's return can settle it */
			__sync_fetch_and_add(&f->reads, 1);
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
	rs->r[n].alloc_cpu = NT_SKB_ALLOC_CPU(skb); /* core_fixes.bpf.h: none before 6.0 */
	rs->n = n + 1;
}

SEC("tp_btf/skb_copy_datagram_iovec")
int BPF_PROG(skb_copy_datagram_iovec, const struct sk_buff *skb, int len)
{
	__u64 addr = skb_key(skb);

	if (!skb_maybe_followed(addr))
		return 0;
	if (len > 0 && (cfg.providers & NT_PROV_SKB_LIFE) && in_task(ctx))
		skb_read_note(skb, len); /* first: it may tie the buffer to its socket */
	skb_later_at(skb, addr, NT_SKB_COPY, 0, len, ctx);
	return 0;
}

SEC("tp_btf/consume_skb")
int BPF_PROG(consume_skb, struct sk_buff *skb, void *location)
{
	skb_later(skb, NT_SKB_CONSUME, SKB_END_CONSUMED, 0, ctx);
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
	addr = skb_key(skb);
	id = skb_maybe_followed(addr) ? bpf_map_lookup_elem(&skbs, &addr) : NULL;
	if (id && id->head != (__u64)BPF_CORE_READ(skb, head)) {
		/* the address's earlier buffer ended unseen (see skb_later): not this drop's lifetime */
		skb_emit_as(id, id->last_len, skb_id_protocol(id), NT_SKB_LAST_SEEN, SKB_END_LAST_SEEN, 0, h.ts_ns, task);
		skb_id_drop(addr);
		id = NULL;
	}
	if (id) {
		uid = id->uid;
		gen = id->gen;
		first = id->hdr.ts_ns;
		skb_id_drop(addr); /* dropped: the lifetime ends here */
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

#define SKB_CONSUMED 1

/* Drops: reason since 5.17 (6.1 passes it), rx_sk (the receiving socket, before skb->sk
 * is set) on 6.12 but not 6.1. One program per prototype, the loader enables the one the kernel passes
 * (collector/bpf/variants.py): __3 leaves rx_sk NULL (skb->sk is used), __2 (5.15) has
 * no reason at all and reports SKB_DROP_REASON_NOT_SPECIFIED (2) for every drop. */
static __always_inline void drop(void *ctx, struct sk_buff *skb, void *location, __u32 r, struct sock *rx_sk)
{
	bool task;

	if (r <= SKB_CONSUMED)
		return;
	task = in_task(ctx);
	if (cfg.providers & (NT_PROV_SKB | NT_PROV_SKB_LIFE))
		skb_drop(skb, location, r, rx_sk ? rx_sk : BPF_CORE_READ(skb, sk), task);
	if (cfg.providers & NT_PROV_TCPDEBUG)
		debug_drop(skb, r, rx_sk, task);
}

SEC("tp_btf/kfree_skb")
int BPF_PROG(kfree_skb, struct sk_buff *skb, void *location, enum skb_drop_reason reason, struct sock *rx_sk)
{
	drop(ctx, skb, location, reason, rx_sk);
	return 0;
}

SEC("tp_btf/kfree_skb")
int BPF_PROG(kfree_skb__3, struct sk_buff *skb, void *location, enum skb_drop_reason reason)
{
	drop(ctx, skb, location, reason, NULL);
	return 0;
}

SEC("tp_btf/kfree_skb")
int BPF_PROG(kfree_skb__2, struct sk_buff *skb, void *location)
{
	drop(ctx, skb, location, 2, NULL);
	return 0;
}

/* ---- udp provider ----------------------------------------------------------- */

/* SPDX-License-Identifier: GPL-2.0 */
/* skb.bpf.h: the skb provider's buffer lifetimes (providers.md 7.2 and 9.2), the parts
 * other providers' programs call: a buffer's first sighting at the device
 * (skb_first, from net_dev_queue and netif_receive_skb in ip.bpf.c), a received UDP
 * datagram's place in its port's queue (udp_rxq_push), and the consumes inferred
 * when a receive call returns (skb_recv_done, from sock_recv_length in
 * attribution.bpf.c). The skb programs themselves are in skb.bpf.c.
 */
#ifndef __NT_SKB_BPF_H
#define __NT_SKB_BPF_H

#include "attribution.bpf.h"

#define SKB_END_CONSUMED 1
#define SKB_END_LAST_SEEN 3

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

static __always_inline void skb_recv_done(const struct sock *sk, int ret, int flags, bool task)
{
	__u16 proto = BPF_CORE_READ(sk, sk_protocol);

	if ((proto == IPPROTO_UDP || proto == IPPROTO_UDPLITE) && ret >= 0 && !(flags & MSG_PEEK))
		udp_rxq_pop(sk, ret, task);
	skb_reads_settle(ret, flags, task);
}

#endif /* __NT_SKB_BPF_H */

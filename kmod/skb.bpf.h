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

/* ---- which buffers are followed -------------------------------------------
 * Every stage hook runs for every buffer, followed or not, so the question "is this
 * buffer followed?" is asked first and answered without a hash lookup: `skb_follow`
 * counts the followed lifetimes per hash slot of their address (nettrail.h), and a zero
 * there ends the hook. The address is the buffer's distance from a fixed one (a plain
 * number to a privileged program, as sock_key), not ptr_value's helper call. */

static __always_inline __u64 skb_key(const struct sk_buff *skb)
{
	return (__u64)skb - (__u64)&owner_epoch;
}

static __always_inline __u32 skb_hash(__u64 addr)
{
	return (__u32)((addr >> 6) * 0x9E3779B97F4A7C15ULL >> 32);
}

static __always_inline struct nt_skb_follow *skb_follow_map(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&skb_follow, &zero);
}

/* false: certainly no followed lifetime at the address (its hooks have nothing to do) */
static __always_inline bool skb_maybe_followed(__u64 addr)
{
	struct nt_skb_follow *f = skb_follow_map();

	return !f || f->n[skb_hash(addr) & (NT_SKB_FOLLOW_SLOTS - 1)];
}

static __always_inline void skb_id_put(__u64 addr, const struct nt_skb_id *id)
{
	struct nt_skb_follow *f;

	if (bpf_map_update_elem(&skbs, &addr, id, BPF_ANY))
		return;
	if ((f = skb_follow_map()))
		__sync_fetch_and_add(&f->n[skb_hash(addr) & (NT_SKB_FOLLOW_SLOTS - 1)], 1);
}

/* A followed lifetime ends (or is closed last-seen): its entry goes, and its count with
 * it, only if this call deleted it (another CPU or the LRU may have first). */
static __always_inline void skb_id_drop(__u64 addr)
{
	struct nt_skb_follow *f;
	__u32 *n;

	if (bpf_map_delete_elem(&skbs, &addr) || !(f = skb_follow_map()))
		return;
	n = &f->n[skb_hash(addr) & (NT_SKB_FOLLOW_SLOTS - 1)];
	if (*n)
		__sync_fetch_and_add(n, -1);
}

/* ---- --skb-sample N: one buffer in N followed ---------------------------------
 * The choice is made once per lifetime, when it starts: each CPU counts the lifetimes it
 * starts in blocks of N and follows one of each block, at a place drawn at random when
 * the block begins. A fixed stride would alias with traffic that repeats with a period
 * dividing N (a data buffer then an ACK, every time); a coin per buffer would make the
 * number followed vary. So M lifetimes started on one CPU give floor(M/N) to ceil(M/N)
 * followed, and `skb_sampling` keeps both counts exactly. With a filter (--filter) the
 * count is of the buffers that pass it (the packet is parsed first); without one the
 * choice comes before any parsing, so a buffer not followed costs a counter (and, off
 * loopback, a slot write), and a pick that is the collector's own buffer (exclude_tgid)
 * is counted but not followed. Loopback's receive (netif_receive_skb) never starts a
 * lifetime: every buffer it receives was sent on this host and seen at its net_dev_queue,
 * so a buffer not followed there has nothing to remember. Elsewhere a buffer not followed
 * is remembered in its `skb_skip_slots` slot, so that its next first-sighting hook
 * (netif_receive_skb after a veth peer's receive entry hook, net_dev_queue of a forwarded
 * buffer) is the same lifetime and neither counts again nor starts following it halfway.
 * Two live buffers whose addresses share a slot: the older one's next sighting starts a
 * new lifetime (counted again, maybe followed from there). */

static __always_inline struct nt_skb_skip *skb_skip_slot(__u64 addr)
{
	__u32 i = skb_hash(addr) & (NT_SKB_SKIP_SLOTS - 1);

	return bpf_map_lookup_elem(&skb_skip_slots, &i);
}

/* the address's slot names it: its latest lifetime was not followed */
static __always_inline bool skb_skip_holds(__u64 addr)
{
	struct nt_skb_skip *s = skb_skip_slot(addr);

	return s && s->addr == addr;
}

static __always_inline void skb_skip_note(__u64 addr, __u64 head, __u8 first)
{
	struct nt_skb_skip *s = skb_skip_slot(addr);

	if (!s)
		return;
	s->addr = addr;
	s->head = head;
	s->last_stage = first;
}

/* A buffer not followed, seen again at a first-sighting hook: still its lifetime? The
 * same rules as a followed one's (skb_first_at), on the stages the slot keeps. */
static __always_inline bool skb_skipped_again(__u64 addr, __u64 head, bool rx, __u8 first, bool has_sock)
{
	struct nt_skb_skip *s = skb_skip_slot(addr);

	if (!s || s->addr != addr || s->head != head)
		return false;
	if (skb_rx_entry_stage(first))
		return skb_was_sent(s->last_stage);
	if (!skb_same_life(s->last_stage, rx, has_sock))
		return false;
	s->last_stage = rx ? NT_SKB_RX : NT_SKB_QUEUE;
	return true;
}

/* --skb-window: between windows no lifetime starts, nor is counted (the verifier drops
 * this without the option) */
static __always_inline bool skb_window_closed(void)
{
	struct nt_skb_window *w;
	__u32 zero = 0;

	if (!cfg.skb_windowed)
		return false;
	w = bpf_map_lookup_elem(&skb_window, &zero);
	return !w || w->closed;
}

/* A lifetime starts: count it; is it its block's pick? (Every one is without sampling.) */
static __always_inline bool skb_sample_pick(void)
{
	struct nt_skb_sampling *c;
	__u32 zero = 0, n = cfg.skb_sample, pos;

	if (skb_window_closed())
		return false;
	c = bpf_map_lookup_elem(&skb_sampling, &zero);
	if (!c)
		return false;
	c->seen++;
	if (n <= 1)
		return true;
	if (!c->left || c->left > n) { /* a block begins */
		c->left = n;
		c->pick = bpf_get_prandom_u32() % n;
	}
	pos = n - c->left--;
	return pos == c->pick;
}

/* The picked lifetime is followed (it passed the filters): count it, and free a slot
 * that still names its address (a stale skip must not outlive this lifetime). */
static __always_inline void skb_sample_followed(__u64 addr)
{
	struct nt_skb_sampling *c;
	struct nt_skb_skip *s;
	__u32 zero = 0;

	c = bpf_map_lookup_elem(&skb_sampling, &zero);
	if (c)
		c->sampled++;
	if (cfg.skb_sample > 1 && (s = skb_skip_slot(addr)) && s->addr == addr)
		s->addr = 0;
}

static __always_inline bool skb_user_filters(void)
{
	return cfg.tgid || cfg.cgroup_id || cfg.netns || cfg.port || cfg.addr_family;
}

/* A first-sighting hook (rx: a receive entry hook or netif_receive_skb, tx:
 * net_dev_queue). The same lifetime gets a stage; otherwise the address was reused
 * without an observed free: close the old lifetime (last-seen) and start a new
 * generation, whose first stage is `first`. A buffer not followed returns before the
 * clock is read or the packet parsed. */
static __always_inline void skb_first_from(const struct sk_buff *skb, const struct sock *sk, bool rx, __u8 first,
					   void *ctx, bool gated)
{
	__u64 addr = skb_key(skb), head = (__u64)skb->head, now = 0; /* direct loads: this runs for every buffer */
	bool entry = skb_rx_entry_stage(first), lo = skb->dev->flags & IFF_LOOPBACK, task = false, picked = false;
	bool slots = cfg.skb_sample > 1 && !lo; /* loopback needs no skip slots (above) */
	bool early = cfg.skb_sample > 1 && !skb_user_filters(); /* choose before parsing: see above */
	struct nt_skb_id fresh = {}, *id = NULL;
	__u32 *g;
	__u64 *counter;
	__u32 zero = 0;

	if (early && lo && !rx) {
		/* Loopback's send, the one first sighting there: the choice before anything else
		 * (measured: the look at what the address held cost more than the choice). A
		 * followed lifetime still at the address (ended unseen) is closed by the next
		 * hook of this buffer that finds it (skb_later_at, loopback's receive). Gated:
		 * skb_first_gate() has chosen this buffer already. */
		if (!gated && !skb_sample_pick())
			return;
		picked = true; /* counted as a new lifetime: whatever the address held has ended */
	}
	if (slots && skb_skip_holds(addr)) {
		/* the address's latest lifetime is one not followed, so `skbs` has nothing at
		 * it (skb_sample_followed frees the slot): no hash lookup */
		if (skb_skipped_again(addr, head, rx, first, sk != NULL))
			return; /* a lifetime not followed, seen again */
	} else if (skb_maybe_followed(addr)) {
		id = bpf_map_lookup_elem(&skbs, &addr);
	}
	if (id) {
		now = bpf_ktime_get_ns();
		task = in_task(ctx);
		if (entry && id->head == head && skb_was_sent(id->last_stage))
			return; /* sent on this host (veth): its rx stage comes at netif_receive_skb */
		if (!entry && !picked && id->head == head && skb_same_life(id->last_stage, rx, sk != NULL)) {
			skb_emit(id, skb, rx ? NT_SKB_RX : NT_SKB_QUEUE, 0, 0, now, task);
			id->prev_ns = now;
			id->last_stage = rx ? NT_SKB_RX : NT_SKB_QUEUE;
			return;
		}
		/* the old lifetime's own length and protocol: skb now describes the address's new buffer */
		skb_emit_as(id, id->last_len, skb_id_protocol(id), NT_SKB_LAST_SEEN, SKB_END_LAST_SEEN, 0, now, task);
		skb_id_drop(addr);
	}
	if (rx && lo)
		return; /* sent on this host and not followed from its net_dev_queue: no lifetime starts here */
	if (early && !picked && !skb_sample_pick()) {
		if (slots)
			skb_skip_note(addr, head, first);
		return;
	}
	if (!id) {
		now = bpf_ktime_get_ns();
		task = in_task(ctx); /* only now: a buffer not followed has returned before */
	}
	flow_from_packet(&fresh.hdr, skb, rx ? 2 : 0);
	fresh.hdr.cookie = cookie_read(sk);
	attribute(&fresh.hdr, NT_EV_SKB_STAGE, task);
	if (!pass(&fresh.hdr)) {
		if (early && slots)
			skb_skip_note(addr, head, first);
		return;
	}
	if (!early && !skb_sample_pick()) {
		if (slots)
			skb_skip_note(addr, head, first);
		return;
	}
	skb_sample_followed(addr);
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
	skb_id_put(addr, &fresh);
	skb_emit(&fresh, skb, fresh.last_stage, 0, 0, now, task);
}

static __always_inline void skb_first_at(const struct sk_buff *skb, const struct sock *sk, bool rx, __u8 first,
					 void *ctx)
{
	skb_first_from(skb, sk, rx, first, ctx, false);
}

/* The first-sighting hooks' part for every buffer, inline in net_dev_queue and
 * netif_receive_skb: on loopback with sampling and no filter, a buffer not picked at its
 * send, or not followed at its receive, ends here, before the out-of-line rest of
 * skb_first_from (its call, its frame's zeroing, its loads) is reached; what that would
 * have done with it is nothing (see skb_first_from: loopback's send chooses first, its
 * receive starts no lifetime). True: the buffer goes on to skb_first_from, gated. */
static __always_inline bool skb_first_gate(const struct sk_buff *skb, bool rx)
{
	if (cfg.skb_sample <= 1 || skb_user_filters() || !(skb->dev->flags & IFF_LOOPBACK))
		return true;
	return rx ? skb_maybe_followed(skb_key(skb)) : skb_sample_pick();
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
	struct nt_skb_follow *f = skb_follow_map();
	struct nt_skb_reads *rs;
	__u32 tid, i;
	__u64 now;

	if (f && !f->reads)
		return; /* no task has copied a followed buffer: nothing to settle, no lookup */
	tid = (__u32)bpf_get_current_pid_tgid();
	rs = bpf_map_lookup_elem(&skb_reads, &tid);
	if (!rs)
		return;
	now = bpf_ktime_get_ns();
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
			skb_id_drop(r->addr);
		}
	}
	if (!bpf_map_delete_elem(&skb_reads, &tid) && f && f->reads)
		__sync_fetch_and_add(&f->reads, -1);
}

/* netif_receive_skb of a tracked UDP datagram: queue it for its local port */
static __always_inline void udp_rxq_push(const struct sk_buff *skb)
{
	__u64 addr = skb_key(skb);
	struct nt_skb_id *id;
	unsigned char *nh;
	struct nt_udp_rxq_key k = {};
	struct nt_udp_rxq_val v = {};
	struct nt_udp_rxq_ends fresh = {}, *q;
	__u8 first, proto, hlen;
	__u16 ports[2];

	if (!skb_maybe_followed(addr))
		return;
	id = bpf_map_lookup_elem(&skbs, &addr);
	nh = BPF_CORE_READ(skb, data);
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
	v.alloc_cpu = NT_SKB_ALLOC_CPU(skb); /* core_fixes.bpf.h: none before 6.0 */
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
		skb_id_drop(addr);
		return;
	}
}

/* sock_recv_length: anything to do? A UDP read may take a tracked datagram from its
 * port's queue; a TCP read settles only while some task copied a followed buffer. */
static __always_inline bool skb_recv_pending(const struct sock *sk)
{
	__u16 proto = sk->sk_protocol;
	struct nt_skb_follow *f;

	if (proto == IPPROTO_UDP || proto == IPPROTO_UDPLITE)
		return true;
	f = skb_follow_map();
	return !f || f->reads;
}

static __always_inline void skb_recv_done(const struct sock *sk, int ret, int flags, bool task)
{
	__u16 proto = sk->sk_protocol;

	if ((proto == IPPROTO_UDP || proto == IPPROTO_UDPLITE) && ret >= 0 && !(flags & MSG_PEEK))
		udp_rxq_pop(sk, ret, task);
	skb_reads_settle(ret, flags, task);
}

#endif /* __NT_SKB_BPF_H */

// SPDX-License-Identifier: GPL-2.0
/* ip.bpf.c: every IP packet at the device, sent (net_dev_queue) or received
 * (netif_receive_skb): the ip provider's records (providers.md 2) and ip-flows, its
 * always-on mode of exact per-flow counters in `ip_flows` with a record for 1 packet
 * in cfg.ip_sample.
 *
 * The same two tracepoints are where the udp provider sees datagrams (udp.bpf.h), the
 * skb provider first sees a buffer (skb.bpf.h), and, for sent segments, where siftr
 * and tcpdebug see the output side (siftr.bpf.h, tcpdebug.bpf.h): one program per
 * tracepoint serves them all, each part switched by cfg.providers.
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
#include "udp.bpf.h"
#include "skb.bpf.h"

static __always_inline struct nt_frag_key frag_key(const struct nt_header *h, const struct iphdr *ip, __u8 dir)
{
	struct nt_frag_key k = { .netns = h->netns, .saddr = ip->saddr, .daddr = ip->daddr, .ident = ip->id,
				 .protocol = ip->protocol, .direction = dir };

	return k;
}

/* The first fragment of an IPv4 datagram: keep its ports for the fragments that follow. */
static __always_inline void frag_ports_note(const struct nt_header *h, const struct iphdr *ip, __u8 dir)
{
	struct nt_frag_key k = frag_key(h, ip, dir);
	__u32 ports = (__u32)h->sport << 16 | h->dport;

	bpf_map_update_elem(&frag_ports, &k, &ports, BPF_ANY);
}

/* A later fragment: its datagram's ports (none if the first fragment was not seen); the
 * last one (MF clear) ends the entry. The record itself shows no ports (translators/ip.py). */
static __always_inline void frag_ports_of(struct nt_header *h, const struct iphdr *ip, __u16 frag, __u8 dir)
{
	struct nt_frag_key k = frag_key(h, ip, dir);
	__u32 *ports = bpf_map_lookup_elem(&frag_ports, &k);

	if (!ports)
		return;
	h->sport = *ports >> 16;
	h->dport = *ports & 0xffff;
	if (!(frag & 0x2000))
		bpf_map_delete_elem(&frag_ports, &k);
}

/* The slot of a key on this CPU: a multiply-add of its six words, the top bits taken
 * (no helper call, no loop; a collision costs only a packet counted in ip_flows). */
static __always_inline __u32 ip_slot_index(const struct nt_ip_flow_key *k)
{
	const __u64 *w = (const __u64 *)k;
	__u64 x = w[0] * 0x9e3779b97f4a7c15ULL + w[1] * 0xc2b2ae3d27d4eb4fULL + w[2] * 0x165667b19e3779f9ULL +
		  w[3] * 0xd6e8feb86659fd93ULL + w[4] * 0xff51afd7ed558ccdULL + w[5] * 0xc4ceb9fe1a85ec53ULL;

	return bpf_get_smp_processor_id() * NT_IP_SLOTS + (__u32)(x >> (64 - NT_IP_SLOTS_SHIFT));
}

static __always_inline bool ip_slot_holds(const struct nt_ip_slot *s, const struct nt_ip_flow_key *k)
{
	const __u64 *a = (const __u64 *)&s->key, *b = (const __u64 *)k;

	return !((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4]) | (a[5] ^ b[5]));
}

/* k's packet was just counted in its entry f: k takes the slot. The flow that held it
 * moves its counts into its own entry first, if that entry is still the one they were
 * counted for (one the LRU evicted and made again has another first_ns: the packets are
 * reported uncounted, as a packet without an entry is). seq is odd meanwhile, so that
 * the collector, which reads slots and entries apart, reads this slot again. Inlined: a
 * subprogram here would be a third frame under the hook and ip_packet, over the 512
 * bytes a verifier before 6.14 allows the chain (6.1 and 6.12 refused it). */
static __always_inline void ip_slot_take(struct nt_ip_slot *s, const struct nt_ip_flow_key *k, const struct nt_ip_flow *f)
{
	struct nt_ip_flow *old;
	struct nt_counters *c;
	__u32 zero = 0;

	__sync_fetch_and_add(&s->seq, 1);
	if (s->packets) {
		old = bpf_map_lookup_elem(&ip_flows, &s->key);
		if (old && old->first_ns == s->first_ns) {
			__sync_fetch_and_add(&old->packets, s->packets);
			__sync_fetch_and_add(&old->bytes, s->bytes);
			if (s->last_ns > old->last_ns)
				old->last_ns = s->last_ns;
		} else if ((c = bpf_map_lookup_elem(&counters, &zero))) {
			c->generated[NT_EV_IP_UNCOUNTED] += s->packets;
		}
	}
	__builtin_memcpy(&s->key, k, sizeof(*k));
	s->packets = 0;
	s->bytes = 0;
	s->first_ns = f->first_ns;
	s->first_jiffies = f->first_jiffies;
	s->last_ns = f->last_ns;
	__sync_fetch_and_add(&s->seq, 1);
}

/* Count the packet for its flow (exact, whatever the sampling): in its CPU's slot if the
 * flow holds it, else in its ip_flows entry; true if it is the entry's ip_sample-th
 * packet, whose full ip record is then emitted. Sampling counts every packet of a flow
 * in one place, its entry, so only ip-flows without samples (`nettrail up`) uses slots. */
static __always_inline bool ip_flow_add(const struct nt_ip_flow_key *kp, struct nt_ip_flow *init, __u32 bytes)
{
	struct nt_ip_slot *s = NULL;
	struct nt_ip_flow *f;
	__u32 zero = 0, i;
	__u64 seen;

	if (!cfg.ip_sample) {
		i = ip_slot_index(kp);
		s = bpf_map_lookup_elem(&ip_slots, &i);
		/* every 256th packet in a slot looks its entry up: the LRU then sees the flow
		 * used (counted only in its slot, a busy flow would look idle and be evicted
		 * first), and a flow whose entry was evicted gets a new one as a miss does */
		if (s && ip_slot_holds(s, kp) &&
		    ((s->packets & 255) != 255 || ((f = bpf_map_lookup_elem(&ip_flows, kp)) && f->first_ns == s->first_ns))) {
			s->packets++;
			s->bytes += bytes;
			if (CONFIG_HZ)
				s->last_ns = s->first_ns + (bpf_jiffies64() - s->first_jiffies) * jiffy_ns();
			else
				s->last_ns = bpf_ktime_get_ns();
			return false;
		}
	}
	f = bpf_map_lookup_elem(&ip_flows, kp);
	if (!f) {
		struct nt_counters *c = bpf_map_lookup_elem(&counters, &zero);

		*init = (struct nt_ip_flow){ .first_ns = bpf_ktime_get_ns(), .first_jiffies = bpf_jiffies64() };
		if (!bpf_map_update_elem(&ip_flows, kp, init, BPF_NOEXIST) && c)
			c->generated[NT_EV_IP_FLOW]++; /* per-CPU slot: entries created */
		f = bpf_map_lookup_elem(&ip_flows, kp);
		if (!f) {
			if (c)
				c->generated[NT_EV_IP_UNCOUNTED]++; /* packets: no entry to count them in */
			return false;
		}
	}
	seen = NT_FETCH_ADD(&f->packets, 1); /* core_fixes.bpf.h: before 5.12 a load, then the add */
	__sync_fetch_and_add(&f->bytes, bytes);
	/* jiffies, not the clock: reading jiffies_64 is a load of a line the stack keeps hot,
	 * the clock an indirect call and a cold line per packet of the always-on mode */
	if (CONFIG_HZ)
		f->last_ns = f->first_ns + (bpf_jiffies64() - f->first_jiffies) * jiffy_ns();
	else
		f->last_ns = bpf_ktime_get_ns(); /* no CONFIG_HZ to scale jiffies with */
	if (s)
		ip_slot_take(s, kp, f);
	if (!cfg.ip_sample || nth_missed(seen, cfg.ip_sample))
		return false;
	__sync_fetch_and_add(&f->samples, 1);
	return true;
}

static __always_inline bool ip_flow_count(const struct nt_header *h, const struct sk_buff *skb, __u32 bytes,
					  __u8 ver, __u8 proto, __u8 dir)
{
	__u32 zero = 0;
	struct nt_ip_scratch *x = bpf_map_lookup_elem(&ip_scratch, &zero);

	if (!x)
		return false;
	x->key.netns = h->netns;
	x->key.if_index = skb->dev->ifindex;
	x->key.sport = h->sport;
	x->key.dport = h->dport;
	x->key.version = ver;
	x->key.protocol = proto;
	x->key.direction = dir;
	x->key._pad = 0;
	__builtin_memcpy(x->key.saddr, h->saddr, NT_ADDR_LEN);
	__builtin_memcpy(x->key.daddr, h->daddr, NT_ADDR_LEN);
	return ip_flow_add(&x->key, &x->init, bytes);
}

/* The udp provider's question about a packet ip_packet has parsed: may it be a datagram
 * (UDP, UDP-Lite, or IPv6 with an extension header next, which user space walks)? */
static __always_inline bool udp_wanted(__u8 ver, __u8 proto, __u8 l4)
{
	return l4 == IPPROTO_UDP || l4 == IPPROTO_UDPLITE || (ver == 6 && ip6_ext_header(proto));
}

#ifndef NT_COMPAT
/* ip-flows alone (`nettrail up`: no records, no samples, no process filter) on an IPv4
 * packet that is not a fragment, the usual case: its key straight from the header, none
 * of the record's header, copies and fragment lookups (about 20 ns at each packet hook
 * on loopback, bench/prog_ns.py). Returns udp_wanted(), or -1 for ip_packet's full path.
 * The filters are pass()'s without a process: netns, port, address. A subprogram of its
 * own, beside ip_packet: its key in ip_packet's frame made the hook's chain too deep. */
static __noinline int ip4_flow_only(const struct sk_buff *skb, __u8 dir)
{
	unsigned char *head = skb->head;
	unsigned char *nh = dir ? head + skb->network_header : skb->data;
	__u32 ip_len = skb->len - (dir ? skb->network_header - (__u32)(skb->data - head) : 0); /* as ip_packet's */
	const struct iphdr *p4 = NT_CAST(nh, struct iphdr);
	/* 8-aligned: the slot's hash and comparison read it as six u64 words */
	struct nt_ip_flow_key k __attribute__((aligned(8))) = {};
	struct nt_ip_flow init;
	__u8 first = *(const __u8 *)p4, proto;

	if ((first >> 4) != 4 || (p4->frag_off & bpf_htons(0x3fff)))
		return -1;
	proto = p4->protocol;
	k.netns = skb->dev->nd_net.net->ns.inum;
	k.if_index = skb->dev->ifindex;
	k.version = 4;
	k.protocol = proto;
	k.direction = dir;
	*(__u32 *)k.saddr = p4->saddr;
	*(__u32 *)k.daddr = p4->daddr;
	if (proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_UDPLITE) {
		/* TCP's ports sit where UDP's do */
		const struct udphdr *l4h = NT_CAST(nh + (first & 0xf) * 4, struct udphdr);

		k.sport = bpf_ntohs(l4h->source);
		k.dport = bpf_ntohs(l4h->dest);
	}
	if ((cfg.netns && k.netns != cfg.netns) || (cfg.port && k.sport != cfg.port && k.dport != cfg.port) ||
	    (cfg.addr_family && (cfg.addr_family != AF_INET || (!addr_match(k.saddr) && !addr_match(k.daddr)))))
		return proto == IPPROTO_UDP || proto == IPPROTO_UDPLITE;
	ip_flow_add(&k, &init, ip_len);
	return proto == IPPROTO_UDP || proto == IPPROTO_UDPLITE;
}
#endif

/* One IP packet: send (net_dev_queue, header at network_header, socket from skb->sk)
 * or receive (netif_receive_skb, header at skb->data, no socket yet). ip-flows counts
 * it; a record follows in full mode (NT_PROV_IP) or when it is sampled. Returns
 * udp_wanted() of the packet, so that the udp provider, which parses a datagram again,
 * does not read every TCP packet's header a second time only to learn it is not one. */
/* Out of line: inlined, its ~330 bytes of stack sat in net_dev_queue's frame above the
 * siftr calls (see net_dev_queue). A static subprogram's frame is there only while it runs. */
static __noinline bool ip_packet(const struct sk_buff *skb, const struct sock *sk, __u8 dir, void *ctx)
{
	unsigned char *head = skb->head;
	unsigned char *nh = dir ? head + skb->network_header : skb->data;
	/* the IP packet's bytes, from the network header (send: after the link header) to the
	 * end: the real length of a GSO/BIG TCP skb, whose header may not hold it. As numbers:
	 * the verifier refuses arithmetic mixing nh (read-only cast below) and skb->data */
	__u32 ip_len = skb->len - (dir ? skb->network_header - (__u32)(skb->data - head) : 0);
	struct nt_header h = {};
	struct nt_event *e;
	__u8 proto, hlen, ver, l4;
	__u32 l4_off;
	__u16 frag = 0; /* IPv4 MF flag and fragment offset, host order */
	struct iphdr ip = {};
	struct ipv6hdr ip6 = {};
	const struct udphdr *l4h;

	/* IPv4 (and the ports) by direct loads through read-only casts, field by field (a
	 * load may not span two fields): the always-on mode parses every packet, and a
	 * probe-read helper call per packet shows in its cost. IPv6 in one helper call. */
#ifdef NT_COMPAT
	/* no bpf_rdonly_cast (before 6.2): the IPv4 header in one probe read */
	__u8 first = 0;

	bpf_probe_read_kernel(&first, 1, nh);
	ver = first >> 4;
	if (ver == 4) {
		if (bpf_probe_read_kernel(&ip, sizeof(ip), nh))
			return false;
#else
	const struct iphdr *p4 = NT_CAST(nh, struct iphdr);
	__u8 first = *(const __u8 *)p4;

	ver = first >> 4;
	if (ver == 4) {
		ip.tos = p4->tos;
		ip.tot_len = p4->tot_len;
		ip.id = p4->id;
		ip.frag_off = p4->frag_off;
		ip.ttl = p4->ttl;
		ip.protocol = p4->protocol;
		ip.check = p4->check;
		ip.saddr = p4->saddr;
		ip.daddr = p4->daddr;
#endif
		h.family = AF_INET;
		__builtin_memcpy(h.saddr, &ip.saddr, 4);
		__builtin_memcpy(h.daddr, &ip.daddr, 4);
		proto = ip.protocol;
		hlen = (first & 0xf) * 4;
		frag = bpf_ntohs(ip.frag_off) & 0x3fff;
	} else if (ver == 6) {
		if (bpf_probe_read_kernel(&ip6, sizeof(ip6), nh))
			return false;
		h.family = AF_INET6;
		__builtin_memcpy(h.saddr, &ip6.saddr, 16);
		__builtin_memcpy(h.daddr, &ip6.daddr, 16);
		proto = ip6.nexthdr;
		hlen = sizeof(ip6);
	} else {
		return false;
	}
	l4 = proto;
	l4_off = hlen;
	if (ver == 6 && proto == 0) {
		/* hop-by-hop first (a BIG TCP packet over 64 KiB carries one): step over it so the
		 * ports, the port filter and the ip-flows key are the upper layer's (the body keeps
		 * the raw next header; user space walks the chain itself) */
		const struct ipv6_opt_hdr *hbh = NT_CAST(nh + hlen, struct ipv6_opt_hdr);

		l4 = NT_RD(hbh, nexthdr);
		l4_off = hlen + (NT_RD(hbh, hdrlen) + 1) * 8;
	}
	h.netns = skb->dev->nd_net.net->ns.inum;
	if ((frag & 0x1fff) && (l4 == IPPROTO_TCP || l4 == IPPROTO_UDP || l4 == IPPROTO_UDPLITE)) {
		/* a later fragment: no ports of its own; its datagram's if the first was seen */
		frag_ports_of(&h, &ip, frag, dir);
	} else if (l4 == IPPROTO_TCP || l4 == IPPROTO_UDP || l4 == IPPROTO_UDPLITE) {
		/* TCP's ports sit where UDP's do */
		l4h = NT_CAST(nh + l4_off, struct udphdr);
		h.sport = bpf_ntohs(NT_RD(l4h, source));
		h.dport = bpf_ntohs(NT_RD(l4h, dest));
		if (frag) /* a first fragment (MF set): its ports for the later ones */
			frag_ports_note(&h, &ip, dir);
	}
	if (cfg.providers & NT_PROV_IP_FLOWS) {
		/* the counters need an owner only to filter by process; pass() skips unattributed exclusion */
		if (cfg.tgid || cfg.cgroup_id) {
			h.cookie = cookie_read(sk);
			attribute(&h, NT_EV_IP, in_task(ctx));
		}
		if (!pass(&h))
			return udp_wanted(ver, proto, l4);
		if (!ip_flow_count(&h, skb, ip_len, ver, l4, dir) && !(cfg.providers & NT_PROV_IP))
			return udp_wanted(ver, proto, l4);
	}
	h.cookie = cookie_read(sk);
	attribute(&h, NT_EV_IP, in_task(ctx));
	if (!pass(&h) || !(e = reserve(NT_EV_IP)))
		return udp_wanted(ver, proto, l4);
	__builtin_memcpy(&e->hdr, &h, sizeof(h));
	e->ip.if_index = skb->dev->ifindex;
	e->ip.skb_len = ip_len;
	e->ip.dev_flags = skb->dev->flags;
	e->ip.direction = dir;
	e->ip.version = ver;
	e->ip.header_length = hlen;
	e->ip.protocol = proto;
	if (ver == 4) {
		e->ip.length = bpf_ntohs(ip.tot_len);
		e->ip.ident = bpf_ntohs(ip.id);
		e->ip.frag_off = bpf_ntohs(ip.frag_off);
		e->ip.checksum = bpf_ntohs(ip.check);
		e->ip.ttl = ip.ttl;
		e->ip.tos = ip.tos;
		e->ip.flow_label = 0;
	} else {
		__u32 word = bpf_ntohl(*(__u32 *)&ip6);

		e->ip.length = bpf_ntohs(ip6.payload_len) + sizeof(ip6);
		e->ip.ident = 0;
		e->ip.frag_off = 0;
		e->ip.checksum = 0;
		e->ip.ttl = ip6.hop_limit;
		e->ip.tos = (word >> 20) & 0xff;
		e->ip.flow_label = word & 0xfffff;
	}
	{
		/* skb_shinfo() is at head + end, a computed pointer: probe reads, one for both
		 * fields where gso_segs follows gso_size (CO-RE tells; it has since 2.6) */
		struct skb_shared_info *shinfo = (struct skb_shared_info *)(head + skb->end);
		__u16 gso[2] = {};

		if (bpf_core_field_offset(struct skb_shared_info, gso_segs) ==
		    bpf_core_field_offset(struct skb_shared_info, gso_size) + 2) {
			bpf_probe_read_kernel(gso, sizeof(gso), &shinfo->gso_size);
		} else {
			gso[0] = BPF_CORE_READ(shinfo, gso_size);
			gso[1] = BPF_CORE_READ(shinfo, gso_segs);
		}
		e->ip.gso_size = gso[0];
		e->ip.gso_segs = gso[1];
	}
	__builtin_memset(e->ip._pad, 0, sizeof(e->ip._pad));
	if (ver != 6 || bpf_probe_read_kernel(e->ip.ext, sizeof(e->ip.ext), nh + sizeof(ip6)))
		__builtin_memset(e->ip.ext, 0, sizeof(e->ip.ext));
	/* IFNAMSIZ bytes by direct loads: the kernel keeps the name NUL-padded */
	__builtin_memcpy(e->ip.if_name, skb->dev->name, sizeof(e->ip.if_name));
	submit(e);
	return udp_wanted(ver, proto, l4);
}

/* ip-flows' and ip's work on one packet: ip4_flow_only() where it applies, else
 * ip_packet(); returns udp_wanted() of the packet. */
static __always_inline bool ip_hook(const struct sk_buff *skb, const struct sock *sk, __u8 dir, void *ctx)
{
#ifndef NT_COMPAT
	if (!(cfg.providers & NT_PROV_IP) && !cfg.ip_sample && !cfg.tgid && !cfg.cgroup_id) {
		int fast = ip4_flow_only(skb, dir);

		if (fast >= 0)
			return fast;
	}
#endif
	return ip_packet(skb, sk, dir, ctx);
}

/* The packet hooks' work in subprograms of their own, so that their frames stay small: a
 * verifier before 6.14 adds up the frames of a call chain (rounded to 32 bytes) against
 * 512 bytes, and siftr_packet's out-of-line flow_admit/siftr_emit sit under it (6.12
 * refused the inlined version: "combined stack size of 2 calls is 608"). */
static __noinline void udp_packet_sub(struct sk_buff *skb, struct sock *sk, __u8 dir, void *ctx)
{
	udp_packet(skb, sk, dir, in_task(ctx));
}

/* Only for the buffers skb_first_gate() lets through (gated: a loopback send it let
 * through is its block's pick). */
static __noinline void skb_first_sub(struct sk_buff *skb, struct sock *sk, bool rx, void *ctx)
{
	/* whether ctx is a task is found out only for a buffer followed */
	skb_first_from(skb, sk, rx, rx ? NT_SKB_RX_FIRST : NT_SKB_TX_FIRST, ctx, true);
}

static __noinline void debug_out_sub(const struct sock *sk, __u64 cookie, const struct seg_ref *r, void *ctx)
{
	struct seg g = {};

	read_seg(&g, r);
	debug_point(sk, cookie, &g, NT_TA_OUTPUT, PRU_NONE, 0, 0, NULL, in_task(ctx));
}

SEC("tp_btf/net_dev_queue")
int BPF_PROG(net_dev_queue, struct sk_buff *skb)
{
	__u16 proto = bpf_ntohs(skb->protocol);
	bool udp = true; /* without ip-flows, udp_packet looks for itself */
	struct sock *sk;
	__u64 cookie;
	struct seg_ref r;

	if (proto != ETH_P_IP && proto != ETH_P_IPV6)
		return 0;
	sk = skb->sk;
	if (cfg.providers & (NT_PROV_IP | NT_PROV_IP_FLOWS))
		udp = ip_hook(skb, sk, 1, ctx);
	if ((cfg.providers & NT_PROV_SKB_LIFE) && skb_first_gate(skb, false))
		skb_first_sub(skb, sk, false, ctx);
	if ((cfg.providers & NT_PROV_UDP) && udp)
		udp_packet_sub(skb, sk, 1, ctx);
	if ((cfg.providers & (NT_PROV_SKB | NT_PROV_SKB_LIFE)) && sk &&
	    (sk->sk_protocol == IPPROTO_UDP || sk->sk_protocol == IPPROTO_UDPLITE) && in_task(ctx))
		port_owner_note(sk); /* the sender, before loopback can drop its datagram inside this very call */
	if (!(cfg.providers & (NT_PROV_SIFTR | NT_PROV_TCPDEBUG)) || !full_tcp(sk))
		return 0; /* request, timewait and control sockets are not full sockets */
	cookie = sk->__sk_common.skc_cookie.counter;
	if (!cookie)
		return 0; /* a socket nettrail has not seen yet: no identity to count it under */
	if ((cfg.providers & NT_PROV_SIFTR) && siftr_out_state(sk->__sk_common.skc_state))
		siftr_packet(sk, cookie, skb, 1, ctx);
	if (cfg.providers & NT_PROV_TCPDEBUG) {
		r = seg_ref_at_transport(skb);
		debug_out_sub(sk, cookie, &r, ctx);
	}
	return 0;
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(netif_receive_skb, struct sk_buff *skb)
{
	__u16 proto = bpf_ntohs(skb->protocol);
	bool udp = true; /* without ip-flows, udp_packet looks for itself */

	if ((cfg.providers & (NT_PROV_IP | NT_PROV_IP_FLOWS)) && (proto == ETH_P_IP || proto == ETH_P_IPV6))
		udp = ip_hook(skb, NULL, 0, ctx);
	if (cfg.providers & NT_PROV_SKB_LIFE) {
		if (skb_first_gate(skb, true))
			skb_first_sub(skb, NULL, true, ctx);
		udp_rxq_push(skb);
	}
	if ((cfg.providers & NT_PROV_UDP) && udp && (proto == ETH_P_IP || proto == ETH_P_IPV6))
		udp_packet_sub(skb, NULL, 0, ctx);
	return 0;
}

/* SPDX-License-Identifier: GPL-2.0 */
/* helpers.bpf.h: what every provider uses: the kernel constants vmlinux.h lacks (they
 * are #defines in the kernel), socket-kind tests, the output path every record takes
 * (reserve() counts each attempt and each failure per type, submit() publishes), and
 * the 4-tuple of a packet from its own headers (flow_from_packet) for buffers without
 * a socket.
 */
#ifndef __NT_HELPERS_BPF_H
#define __NT_HELPERS_BPF_H

#include "maps.bpf.h"

#define AF_INET 2
#define AF_INET6 10
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define MSG_OOB 1

/* enum tcp_state values (include/net/tcp_states.h) */
#define TCP_ESTABLISHED 1
#define TCP_SYN_SENT 2
#define TCP_SYN_RECV 3
#define TCP_FIN_WAIT1 4
#define TCP_FIN_WAIT2 5
#define TCP_CLOSE 7
#define TCP_CLOSE_WAIT 8
#define TCP_LAST_ACK 9
#define TCP_LISTEN 10
#define TCP_CLOSING 11
#define TCP_TIME_WAIT 6
#define TCP_NEW_SYN_RECV 12

/* Request and timewait mini-sockets end after sock_common. */
static __always_inline bool full_sock_state(__u8 st)
{
	return st != TCP_TIME_WAIT && st != TCP_NEW_SYN_RECV;
}

#define SOCK_STREAM 1

/* An X -> CLOSE after the peer's FIN came (SOCK_DONE in sk_flags, set by tcp_fin() before
 * it hands a FIN_WAIT_2 socket to tcp_time_wait(sk, TCP_TIME_WAIT)): the timewait
 * mini-socket that follows is in TIME_WAIT; without it, in FIN_WAIT_2 (nettrail.h,
 * NT_STATE_FIN_RCVD). Bit 1 of sk_flags (skc_flags) in every kernel nettrail supports. */
#define NT_SOCK_DONE 1
static __always_inline bool fin_received(const struct sock *sk, int newstate)
{
	return newstate == TCP_CLOSE && (BPF_CORE_READ(sk, __sk_common.skc_flags) & (1UL << NT_SOCK_DONE));
}

/* A full TCP socket (not a request or timewait mini-socket, which end after sock_common). */
static __always_inline bool full_tcp(const struct sock *sk)
{
	__u8 st;

	if (!sk)
		return false;
	st = sk->__sk_common.skc_state;
	if (!full_sock_state(st))
		return false;
	return sk->sk_protocol == IPPROTO_TCP && sk->sk_type == SOCK_STREAM;
}

static __always_inline __u64 ptr_value(const void *p)
{
	__u64 v = 0;

	bpf_probe_read_kernel(&v, sizeof(v), &p); /* the address as a number, never exported */
	return v;
}

/* seen % n != 0 (n > 0), for the per-packet sampling decisions: a 64-bit division is
 * tens of cycles on x86, so a power of two (ppl 8, 32, ...) takes a mask instead. n is
 * read from cfg, which the verifier knows (frozen .rodata): the branch not taken is
 * removed at load, the test costs nothing at run time. */
static __always_inline bool nth_missed(__u64 seen, __u64 n)
{
	if (!(n & (n - 1)))
		return seen & (n - 1);
	return seen % n;
}

/* The per-packet events: siftr samples, ip and udp packet records, tcpdebug snapshots,
 * buffer lifecycle stages. type is a constant at every (inlined) call site, so this
 * costs nothing at run time. */
static __always_inline bool bulk_event(__u16 type)
{
	return type == NT_EV_SIFTR || type == NT_EV_IP || type == NT_EV_UDP || type == NT_EV_DEBUG ||
	       type == NT_EV_SKB_STAGE;
}

/* Half the ring holds events the reader has not taken yet: it is falling behind. */
static __always_inline bool ring_pressed(void)
{
	return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= bpf_ringbuf_query(&events, BPF_RB_RING_SIZE) / 2;
}

/* An event given up before its reservation: counted generated and lost, as a failed
 * reservation is. */
static __always_inline void refuse(__u16 type)
{
	__u32 zero = 0;
	struct nt_counters *c = bpf_map_lookup_elem(&counters, &zero);

	if (c) {
		__sync_fetch_and_add(&c->generated[type & (NT_EV_MAX - 1)], 1);
		__sync_fetch_and_add(&c->lost[type & (NT_EV_MAX - 1)], 1);
	}
}

/* Reserve a ring-buffer slot; count the attempt and any failure per CPU and type.
 * Per-packet events stop at three quarters of the ring: when the reader falls behind
 * a bulk transfer, its samples are lost (and counted) first, and the last quarter stays
 * for the events a connection has few of and a user cannot do without: state changes,
 * retransmits, resets, final counters, drops. */
static __always_inline struct nt_event *reserve(__u16 type)
{
	__u32 zero = 0;
	struct nt_counters *c = bpf_map_lookup_elem(&counters, &zero);
	struct nt_event *e;

	if (c)
		__sync_fetch_and_add(&c->generated[type & (NT_EV_MAX - 1)], 1);
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		if (c)
			__sync_fetch_and_add(&c->lost[type & (NT_EV_MAX - 1)], 1);
		return NULL;
	}
	/* Reserved, then given back: each path returns a constant NULL or the checked slot,
	 * so the caller's NULL check folds away. 6.1's verifier cannot tell that a checked
	 * slot is not NULL when it is tested again, and took such a path to leak it. */
	if (bulk_event(type) &&
	    bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) > bpf_ringbuf_query(&events, BPF_RB_RING_SIZE) / 4 * 3) {
		bpf_ringbuf_discard(e, BPF_RB_NO_WAKEUP);
		if (c)
			__sync_fetch_and_add(&c->lost[type & (NT_EV_MAX - 1)], 1);
		return NULL;
	}
	return e;
}

/* Events that happened and will never be reserved (more messages than a program
 * follows): counted generated and lost, as a refused reservation is. */
static __always_inline void count_unrecorded(__u16 type, __u64 n)
{
	__u32 zero = 0;
	struct nt_counters *c = bpf_map_lookup_elem(&counters, &zero);

	if (!c)
		return;
	__sync_fetch_and_add(&c->generated[type & (NT_EV_MAX - 1)], n);
	__sync_fetch_and_add(&c->lost[type & (NT_EV_MAX - 1)], n);
}

/* A ring slot: the event behind the ring's 8-byte record header, 8-byte aligned. */
#define NT_SLOT ((sizeof(struct nt_event) + 8 + 7) & ~7UL)

/* Publish a slot, waking the reader only when the ring crosses an eighth full (and
 * then every 1024th record while it stays above, should that crossing be missed).
 * A wake-up is an irq_work self-interrupt, an exit to the hypervisor in a VM that
 * costs microseconds: paid per event, as the default (wake whenever the reader has
 * caught up) does at low rates, it was most of what ppl=32 cost the traffic; paid on
 * every event above a threshold it made ppl=1 ten times dearer. Otherwise the
 * reader finds the events on its next timed poll (100 ms, collector/bpf/source.py). */
static __always_inline void submit(void *e)
{
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	__u64 eighth = bpf_ringbuf_query(&events, BPF_RB_RING_SIZE) / 8;
	__u64 flags = BPF_RB_NO_WAKEUP;

	if (avail >= eighth &&
	    (avail - NT_SLOT < eighth || (bpf_ringbuf_query(&events, BPF_RB_PROD_POS) / NT_SLOT) % 1024 == 0))
		flags = BPF_RB_FORCE_WAKEUP;
	bpf_ringbuf_submit(e, flags);
}

/* The 4-tuple of a packet from its headers; returns the IP protocol (0 unknown).
 * reverse: local side first for a received segment (its destination is local). */
static __always_inline __u8 flow_from_packet(struct nt_header *h, const struct sk_buff *skb, int reverse)
{
	unsigned char *head = BPF_CORE_READ(skb, head);
	__u16 nh = BPF_CORE_READ(skb, network_header);
	__u16 th = BPF_CORE_READ(skb, transport_header);

	if (reverse == 2) { /* receive hooks: the network header is at skb->data */
		nh = BPF_CORE_READ(skb, data) - head;
		th = 0xffff;
		reverse = false;
	}
	__u16 ports[2];
	__u8 ver, proto = 0;

	h->netns = BPF_CORE_READ(skb, dev, nd_net.net, ns.inum);
	if (nh == 0xffff || bpf_probe_read_kernel(&ver, 1, head + nh))
		return 0;
	ver >>= 4;
	if (ver == 4) {
		struct iphdr ip;

		if (bpf_probe_read_kernel(&ip, sizeof(ip), head + nh))
			return 0;
		h->family = AF_INET;
		__builtin_memcpy(reverse ? h->daddr : h->saddr, &ip.saddr, 4);
		__builtin_memcpy(reverse ? h->saddr : h->daddr, &ip.daddr, 4);
		proto = ip.protocol;
		if (bpf_ntohs(ip.frag_off) & 0x1fff)
			return proto; /* a later fragment: no transport header, no ports */
		if (th == 0xffff || th <= nh)
			th = nh + ip.ihl * 4; /* not set yet on this path */
	} else if (ver == 6) {
		struct ipv6hdr ip6;

		if (bpf_probe_read_kernel(&ip6, sizeof(ip6), head + nh))
			return 0;
		h->family = AF_INET6;
		__builtin_memcpy(reverse ? h->daddr : h->saddr, &ip6.saddr, 16);
		__builtin_memcpy(reverse ? h->saddr : h->daddr, &ip6.daddr, 16);
		proto = ip6.nexthdr; /* extension headers are not walked */
		if (th == 0xffff || th <= nh)
			th = nh + sizeof(ip6);
	} else {
		return 0;
	}
	if ((proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_UDPLITE) &&
	    !bpf_probe_read_kernel(ports, sizeof(ports), head + th)) {
		h->sport = bpf_ntohs(ports[reverse ? 1 : 0]);
		h->dport = bpf_ntohs(ports[reverse ? 0 : 1]);
	}
	return proto;
}

static __always_inline void flow_from_segment(struct nt_header *h, const struct sk_buff *skb)
{
	flow_from_packet(h, skb, true);
}

#endif /* __NT_HELPERS_BPF_H */

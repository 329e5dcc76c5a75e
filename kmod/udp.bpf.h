/* SPDX-License-Identifier: GPL-2.0 */
/* udp.bpf.h: the udp provider's datagram records (providers.md 3): each datagram at the
 * device (udp_packet, from net_dev_queue and netif_receive_skb in ip.bpf.c) with exact
 * per-flow counts in `udp_flows`, and each send or receive call's result (udp_call,
 * from the socket-call programs in attribution.bpf.c).
 */
#ifndef __NT_UDP_BPF_H
#define __NT_UDP_BPF_H

#include "attribution.bpf.h"

/* hop-by-hop, routing, fragment, destination options */
static __always_inline bool ip6_ext_header(__u8 proto)
{
	return proto == 0 || proto == 43 || proto == 44 || proto == 60;
}

/* An IPv6 packet whose next header is an extension header: maybe a datagram. The raw
 * bytes after the fixed header go to user space, which walks the chain (bounded) and
 * keeps it only if it ends in UDP; the udp_flows counts do not include such packets. */
static __always_inline void udp_ip6_ext(const struct sk_buff *skb, struct nt_header *h, unsigned char *nh, __u8 proto,
					__u8 dir, bool task)
{
	struct nt_event *e;

	h->cookie = cookie_read(BPF_CORE_READ(skb, sk));
	attribute(h, NT_EV_UDP, task);
	if (!pass(h) || !(e = reserve(NT_EV_UDP)))
		return;
	__builtin_memcpy(&e->hdr, h, sizeof(*h));
	e->udp.ret = 0;
	e->udp.length = 0;
	e->udp.checksum = 0;
	e->udp.gso_segs = 0;
	e->udp.direction = dir;
	e->udp.call = 0;
	e->udp.protocol = proto;
	__builtin_memset(e->udp._pad, 0, sizeof(e->udp._pad));
	if (bpf_probe_read_kernel(e->udp.ext, sizeof(e->udp.ext), nh + 40))
		__builtin_memset(e->udp.ext, 0, sizeof(e->udp.ext));
	BPF_CORE_READ_STR_INTO(&e->udp.if_name, skb, dev, name);
	submit(e);
}

/* A datagram at the device: send (net_dev_queue, header at network_header, socket
 * from skb->sk) or receive (netif_receive_skb, header at skb->data, no socket). */
static __always_inline void udp_packet(const struct sk_buff *skb, const struct sock *sk, __u8 dir, bool task)
{
	unsigned char *head = BPF_CORE_READ(skb, head);
	struct nt_udp_flow_key key = {};
	struct nt_udp_flow *f, zero = {};
	struct nt_header h = {};
	struct udphdr uh;
	struct nt_event *e;
	unsigned char *nh;
	__u8 proto, first;
	__u32 hlen, payload;

	nh = dir ? head + BPF_CORE_READ(skb, network_header) : BPF_CORE_READ(skb, data);
	if (bpf_probe_read_kernel(&first, 1, nh))
		return;
	/* the protocol byte first: every TCP packet comes here too, and the whole parse
	 * below (flow_from_packet) is the udp provider's main cost on a TCP host */
	if (bpf_probe_read_kernel(&proto, 1, nh + ((first >> 4) == 4 ? 9 : 6)))
		return;
	if (proto != IPPROTO_UDP && proto != IPPROTO_UDPLITE && !((first >> 4) == 6 && ip6_ext_header(proto)))
		return;
	proto = flow_from_packet(&h, skb, dir ? 0 : 2);
	if ((first >> 4) == 6 && ip6_ext_header(proto)) {
		udp_ip6_ext(skb, &h, nh, proto, dir, task);
		return;
	}
	if (proto != IPPROTO_UDP && proto != IPPROTO_UDPLITE)
		return;
	if ((first >> 4) == 4) {
		__be16 fo;

		/* a later fragment is no datagram: the first carries the UDP header, whose length
		 * covers them all, so a datagram is one record and one count however it is cut */
		if (bpf_probe_read_kernel(&fo, sizeof(fo), nh + 6) || (bpf_ntohs(fo) & 0x1fff))
			return;
	}
	hlen = (first >> 4) == 4 ? (first & 0xf) * 4 : 40;
	if (bpf_probe_read_kernel(&uh, sizeof(uh), nh + hlen))
		return;
	h.cookie = cookie_read(sk);
	attribute(&h, NT_EV_UDP, task);
	if (!pass(&h))
		return;
	payload = bpf_ntohs(uh.len) > sizeof(uh) ? bpf_ntohs(uh.len) - sizeof(uh) : 0;
	key.netns = h.netns;
	key.sport = h.sport;
	key.dport = h.dport;
	key.family = h.family;
	key.protocol = proto;
	__builtin_memcpy(key.saddr, h.saddr, NT_ADDR_LEN);
	__builtin_memcpy(key.daddr, h.daddr, NT_ADDR_LEN);
	f = bpf_map_lookup_elem(&udp_flows, &key);
	if (!f) {
		bpf_map_update_elem(&udp_flows, &key, &zero, BPF_NOEXIST);
		f = bpf_map_lookup_elem(&udp_flows, &key);
	}
	if (f) {
		__sync_fetch_and_add(dir ? &f->packets_out : &f->packets_in, 1);
		__sync_fetch_and_add(dir ? &f->bytes_out : &f->bytes_in, payload);
	}
	e = reserve(NT_EV_UDP);
	if (!e)
		return;
	__builtin_memcpy(&e->hdr, &h, sizeof(h));
	e->udp.ret = 0;
	e->udp.length = bpf_ntohs(uh.len);
	e->udp.checksum = bpf_ntohs(uh.check);
	hlen = BPF_CORE_READ(skb, end); /* reused: the shared info sits at head + end */
	e->udp.gso_segs = BPF_CORE_READ((struct skb_shared_info *)(head + hlen), gso_segs);
	e->udp.direction = dir;
	e->udp.call = 0;
	e->udp.protocol = proto;
	__builtin_memset(e->udp._pad, 0, sizeof(e->udp._pad));
	__builtin_memset(e->udp.ext, 0, sizeof(e->udp.ext));
	BPF_CORE_READ_STR_INTO(&e->udp.if_name, skb, dev, name);
	submit(e);
}

/* An unconnected socket's call: the peer the cgroup sock_addr hooks saw it name
 * (udp_peer.bpf.c), if this thread's last one was on this socket. Taken once. */
static __always_inline void udp_call_peer(struct nt_header *h)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct nt_udp_peer *p = bpf_map_lookup_elem(&udp_peers, &pid_tgid);

	if (!p)
		return;
	if (p->cookie == h->cookie && p->family == h->family) {
		h->dport = p->port;
		__builtin_memcpy(h->daddr, p->addr, NT_ADDR_LEN);
	}
	bpf_map_delete_elem(&udp_peers, &pid_tgid);
}

/* The peer a call named or got: a sockaddr of the socket's family at `addr`, `len` bytes
 * long, in the caller's memory (`user`: the system calls' source) or the kernel's (the
 * functions' source); nothing if there is none. */
static __always_inline void udp_peer_read(struct nt_header *h, __u64 addr, __u32 len, bool user)
{
	struct sockaddr_in6 sa = {};
	__u32 size = len < sizeof(sa) ? sizeof(struct sockaddr_in) : sizeof(sa);
	long err;

	if (!addr || len < sizeof(struct sockaddr_in))
		return;
	err = user ? bpf_probe_read_user(&sa, size, (void *)addr) : bpf_probe_read_kernel(&sa, size, (void *)addr);
	if (err || sa.sin6_family != h->family)
		return;
	h->dport = bpf_ntohs(sa.sin6_port);
	if (h->family == AF_INET)
		__builtin_memcpy(h->daddr, &((struct sockaddr_in *)&sa)->sin_addr, 4);
	else
		__builtin_memcpy(h->daddr, &sa.sin6_addr, NT_ADDR_LEN);
}

/* A call's record, its header's socket and peer filled: bytes or -errno, in the
 * caller's context, local first; `call` says where it was seen (NT_UDP_CALL_*). */
static __always_inline void udp_call_emit(struct nt_header *h, int ret, __u8 dir, __u8 proto, __u8 call, __u8 task)
{
	struct nt_event *e;

	attribute(h, NT_EV_UDP, task);
	if (!pass(h) || !(e = reserve(NT_EV_UDP)))
		return;
	__builtin_memcpy(&e->hdr, h, sizeof(*h));
	__builtin_memset(&e->udp, 0, sizeof(e->udp));
	e->udp.ret = ret;
	e->udp.direction = dir;
	e->udp.call = call;
	e->udp.protocol = proto;
	submit(e);
}

/* A send/recv call on a UDP socket at sock_send_length / sock_recv_length; the remote
 * end from the socket (connected) or the call (udp_call_peer). */
static __always_inline void udp_call(const struct sock *sk, int ret, __u8 dir, __u8 task)
{
	struct nt_header h = {};

	h.cookie = cookie_of(sk);
	fill_flow(&h, sk);
	if (!h.dport)
		udp_call_peer(&h);
	udp_call_emit(&h, ret, dir, BPF_CORE_READ(sk, sk_protocol), NT_UDP_CALL_SOCK, task);
}

/* ---- siftr and tcpdebug packet points ------------------------------------ */

#endif /* __NT_UDP_BPF_H */

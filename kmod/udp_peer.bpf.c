// SPDX-License-Identifier: GPL-2.0
/* udp_peer.bpf.c: the peer of an unconnected UDP socket's send or receive call, from the
 * cgroup sock_addr hooks the kernel runs for UDP calls only (attached to the cgroup v2
 * root, so every process's calls pass them): sendmsg4/6 before an unconnected send, with
 * the destination the caller gave; recvmsg4/6 after a receive that asked for the source,
 * with that source. Nothing runs for TCP or for a connected UDP socket (whose peer is in
 * the socket), so the udp provider's call records (udp-calls, the always-on mode) know
 * their peers without a program on every packet.
 *
 * The send hook also notes the sender by its port before the datagram leaves: on
 * loopback a datagram to a closed port is dropped inside the send call, before
 * sock_send_length, and the skb provider attributes that drop by the port.
 *
 * Every program returns 1 (allow) and never changes the address: these hooks may
 * rewrite or refuse a call, which nettrail must never do.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "nettrail.h"
#include "attribution.bpf.h"

#define SOCK_ADDR_ALLOW 1

/* The socket's network namespace (not the caller's: a socket made in another namespace
 * may be used from this one); the context's socket is a struct bpf_sock, read as the
 * struct sock it is (NT_CAST: bpf_rdonly_cast, or a plain cast read by probe reads). */
static __always_inline __u32 sock_netns(struct bpf_sock *sk)
{
	const struct sock *s = NT_CAST(sk, struct sock);

	return BPF_CORE_READ(s, __sk_common.skc_net.net, ns.inum);
}

static __always_inline void stash(struct bpf_sock_addr *ctx, bool v6)
{
	struct nt_udp_peer p = {};
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	p.cookie = bpf_get_socket_cookie(ctx);
	p.port = bpf_ntohs(ctx->user_port);
	if (v6) {
		p.family = AF_INET6;
		((__u32 *)p.addr)[0] = ctx->user_ip6[0];
		((__u32 *)p.addr)[1] = ctx->user_ip6[1];
		((__u32 *)p.addr)[2] = ctx->user_ip6[2];
		((__u32 *)p.addr)[3] = ctx->user_ip6[3];
	} else {
		p.family = AF_INET;
		((__u32 *)p.addr)[0] = ctx->user_ip4;
	}
	bpf_map_update_elem(&udp_peers, &pid_tgid, &p, BPF_ANY);
}

static __always_inline int on_send(struct bpf_sock_addr *ctx, bool v6)
{
	struct bpf_sock *sk = ctx->sk;

	if ((cfg.providers & (NT_PROV_UDP | NT_PROV_UDP_CALLS)) && cfg.udp_calls_from == NT_UDP_FROM_SOCK)
		stash(ctx, v6);
	if ((cfg.providers & (NT_PROV_SKB | NT_PROV_SKB_LIFE)) && sk)
		port_owner_set(sk->src_port, sock_netns(sk)); /* src_port: host order, bound by now */
	return SOCK_ADDR_ALLOW;
}

static __always_inline int on_receive(struct bpf_sock_addr *ctx, bool v6)
{
	if ((cfg.providers & (NT_PROV_UDP | NT_PROV_UDP_CALLS)) && cfg.udp_calls_from == NT_UDP_FROM_SOCK)
		stash(ctx, v6);
	return SOCK_ADDR_ALLOW;
}

SEC("cgroup/sendmsg4")
int udp_sendmsg4(struct bpf_sock_addr *ctx)
{
	return on_send(ctx, false);
}

SEC("cgroup/sendmsg6")
int udp_sendmsg6(struct bpf_sock_addr *ctx)
{
	return on_send(ctx, true);
}

SEC("cgroup/recvmsg4")
int udp_recvmsg4(struct bpf_sock_addr *ctx)
{
	return on_receive(ctx, false);
}

SEC("cgroup/recvmsg6")
int udp_recvmsg6(struct bpf_sock_addr *ctx)
{
	return on_receive(ctx, true);
}

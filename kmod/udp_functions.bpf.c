// SPDX-License-Identifier: GPL-2.0
/* udp_functions.bpf.c: the udp providers' call records on a kernel without
 * sock_send_length / sock_recv_length (before Linux 6.3, Debian 12's 6.1), at the exit of
 * the UDP protocol's own send and receive functions: udp_sendmsg, udp_recvmsg,
 * udpv6_sendmsg, udpv6_recvmsg (fexit, BPF trampolines). They run for UDP and UDP-Lite
 * calls only, whatever system call or kernel path made them (write, read, io_uring
 * included), so TCP traffic pays nothing. Loaded only there (collector/bpf/loader.py,
 * udp_call_source); a kernel that refuses them gets udp_syscalls.bpf.c instead.
 *
 * The socket is a BTF pointer here, as at sock_send_length: the same header, cookie and
 * owner. The peer of an unconnected socket's call is the address in the call's msghdr:
 * the kernel's copy of the destination a send named, the source a receive wrote (its
 * length in *addr_len); none when the receive asked for none.
 *
 * The prototypes are 6.1's (udp_recvmsg(sk, msg, len, flags, addr_len) from 5.19; 6.18's
 * has no addr_len): the loader checks the kernel's BTF before choosing these
 * (collector/bpf/variants.py, UDP_FUNCTION_ARGS).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "nettrail.h"
#include "attribution.bpf.h"
#include "udp.bpf.h"

static __always_inline void udp_function_call(void *ctx, struct sock *sk, struct msghdr *msg, int ret, __u8 dir,
					      int *addr_len)
{
	struct nt_header h = {};
	__u32 len = 0;
	bool task;

	if (!(cfg.providers & (NT_PROV_UDP | NT_PROV_UDP_CALLS)) || cfg.udp_calls_from != NT_UDP_FROM_FUNCTIONS)
		return;
	task = in_task(ctx);
	if (!task) /* a kernel user's call (none on a UDP socket in task-less context is expected) */
		return;
	h.cookie = cookie_of(sk);
	fill_flow(&h, sk);
	if (!h.dport && ret >= 0) {
		if (dir)
			len = BPF_CORE_READ(msg, msg_namelen);
		else if (addr_len)
			bpf_probe_read_kernel(&len, sizeof(len), addr_len);
		udp_peer_read(&h, (__u64)BPF_CORE_READ(msg, msg_name), len, false);
	}
	udp_call_emit(&h, ret, dir, sk->sk_protocol, NT_UDP_CALL_FN, hook_call(task));
}

SEC("fexit/udp_sendmsg")
int BPF_PROG(udp_sendmsg, struct sock *sk, struct msghdr *msg, size_t len, int ret)
{
	/* an IPv6 socket's datagram to a v4-mapped address: udpv6_sendmsg calls this and records it */
	if (sk->__sk_common.skc_family != AF_INET6)
		udp_function_call(ctx, sk, msg, ret, 1, NULL);
	return 0;
}

SEC("fexit/udp_recvmsg")
int BPF_PROG(udp_recvmsg, struct sock *sk, struct msghdr *msg, size_t len, int flags, int *addr_len, int ret)
{
	udp_function_call(ctx, sk, msg, ret, 0, addr_len);
	return 0;
}

SEC("fexit/udpv6_sendmsg")
int BPF_PROG(udpv6_sendmsg, struct sock *sk, struct msghdr *msg, size_t len, int ret)
{
	udp_function_call(ctx, sk, msg, ret, 1, NULL);
	return 0;
}

SEC("fexit/udpv6_recvmsg")
int BPF_PROG(udpv6_recvmsg, struct sock *sk, struct msghdr *msg, size_t len, int flags, int *addr_len, int ret)
{
	udp_function_call(ctx, sk, msg, ret, 0, addr_len);
	return 0;
}

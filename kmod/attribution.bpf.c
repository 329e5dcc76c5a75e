// SPDX-License-Identifier: GPL-2.0
/* attribution.bpf.c: every send and receive call on a socket (sock_send_length,
 * sock_recv_length), loaded for every provider: the caller is the socket's user, so
 * this is where the owner map learns who uses each socket (providers.md 9.3), cheaply
 * on a busy socket through the per-CPU owner hints. The same calls are tcpdebug's
 * send and receive requests, the udp provider's call records, and where the skb
 * provider infers the consumes of the buffers a receive copied. Before 6.3 (no such
 * tracepoints) TCP's calls come from tcp_functions.bpf.c instead (user_call.bpf.h).
 *
 * This file holds the one definition of every map (maps.bpf.h) and the licence.
 */
#define NT_MAPS_DEFINE
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "nettrail.h"
#include "attribution.bpf.h"
#include "tcpdebug.bpf.h"
#include "udp.bpf.h"
#include "skb.bpf.h"
#include "user_call.bpf.h"

char LICENSE[] SEC("license") = "GPL";

SEC("tp_btf/sock_send_length")
int BPF_PROG(sock_send_length, struct sock *sk, int ret, int flags)
{
	user_call(sk, ret, flags, PRU_SEND, PRU_SENDOOB, NT_DEBUG_HOOK_TP, ctx);
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(sock_recv_length, struct sock *sk, int ret, int flags)
{
	user_call(sk, ret, flags, PRU_RCVD, PRU_RCVOOB, NT_DEBUG_HOOK_TP, ctx);
	if ((cfg.providers & NT_PROV_SKB_LIFE) && skb_recv_pending(sk) && in_task(ctx))
		skb_recv_done(sk, ret, flags, true);
	return 0;
}

/* Before 5.12 (cookie_of, attribution.bpf.h) the tracing programs read a socket's cookie
 * and cannot make one: these ask for it where the kernel lets a program, so the socket
 * has it before any tracepoint sees it. Loaded only there (collector/bpf/loader.py,
 * COOKIE_PROGRAMS), on the root of the cgroup v2 hierarchy. Both allow everything (1)
 * and change nothing. */
SEC("cgroup/sock_create")
int sock_create(struct bpf_sock *ctx)
{
#ifdef NT_LEGACY
	__u64 key = ptr_value(ctx) - ptr_value(&owner_epoch); /* as cookie_compat's key (sock_key) */

	bpf_map_delete_elem(&cookie_subs, &key); /* a substitute of the socket this address was */
#endif
	bpf_get_socket_cookie(ctx);
	return 1;
}

/* A passive child has no socket() call: its cookie is asked for as it is established
 * (tcp_init_transfer() runs this before its change to ESTABLISHED). */
SEC("sockops")
int sock_ops(struct bpf_sock_ops *ctx)
{
	if (ctx->op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		bpf_get_socket_cookie(ctx);
	return 1;
}

// SPDX-License-Identifier: GPL-2.0
/* attribution.bpf.c: every send and receive call on a socket (sock_send_length,
 * sock_recv_length), loaded for every provider: the caller is the socket's user, so
 * this is where the owner map learns who uses each socket (providers.md 9.3), cheaply
 * on a busy socket through the per-CPU owner hints. The same calls are tcpdebug's
 * send and receive requests, the udp provider's call records, and where the skb
 * provider infers the consumes of the buffers a receive copied.
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

char LICENSE[] SEC("license") = "GPL";

static __always_inline void user_call(const struct sock *sk, int ret, int flags, __u8 req, __u8 oob_req, void *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid(), skv = sock_key(sk), epoch = owner_epoch;
	__u32 slot = (skv >> 10) % NT_OWNER_HINTS; /* struct sock is over 1 KiB: the low bits say little */
	struct nt_owner_hint *hint = bpf_map_lookup_elem(&owner_hints, &slot);
	struct nt_owner cur = {};
	__u16 proto;
	bool task;
	__u64 cookie;

	/* tcpdebug records every call: no shortcut then */
	if (!(cfg.providers & NT_PROV_TCPDEBUG) && hint && hint->sk == skv && hint->pid_tgid == pid_tgid &&
	    hint->epoch == epoch)
		return;
	proto = sk->sk_protocol;
	if (proto == IPPROTO_UDP || proto == IPPROTO_UDPLITE) {
		task = in_task(ctx);
		if (!task)
			return;
		if (cfg.providers & (NT_PROV_SKB | NT_PROV_SKB_LIFE))
			port_owner_note(sk);
		if ((cfg.providers & (NT_PROV_UDP | NT_PROV_UDP_CALLS)) && cfg.udp_calls_from == NT_UDP_FROM_SOCK)
			udp_call(sk, ret, req == PRU_SEND, hook_call(task)); /* attribute() notes the owner */
		return;
	}
	if (proto != IPPROTO_TCP)
		return;
	cookie = cookie_of(sk);
	if (cfg.providers & NT_PROV_TCPDEBUG) {
		debug_point(sk, cookie, NULL, NT_TA_USER, (flags & MSG_OOB) ? oob_req : req, 0, 0, NULL,
			    hook_call(in_task(ctx)));
		return; /* debug_point's attribute() already noted the owner */
	}
	if (owner_is_current(cookie)) {
		if (hint) { /* the epoch from before the lookup: a change since then retires it */
			hint->sk = skv;
			hint->pid_tgid = pid_tgid;
			hint->epoch = epoch;
		}
		return;
	}
	if (!in_task(ctx))
		return;
	owner_from_current(&cur);
	owner_note(cookie, &cur);
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(sock_send_length, struct sock *sk, int ret, int flags)
{
	user_call(sk, ret, flags, PRU_SEND, PRU_SENDOOB, ctx);
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(sock_recv_length, struct sock *sk, int ret, int flags)
{
	user_call(sk, ret, flags, PRU_RCVD, PRU_RCVOOB, ctx);
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

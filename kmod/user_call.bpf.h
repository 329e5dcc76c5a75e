/* SPDX-License-Identifier: GPL-2.0 */
/* user_call.bpf.h: a send or receive call on a socket, as its caller made it: where the
 * owner map learns who uses each socket (providers.md 9.3, cheaply on a busy socket through
 * the per-CPU owner hints), tcpdebug's SEND/RCVD user requests (with the bytes the call
 * moved), the udp providers' call records and skb's sender notes. Called at
 * sock_send_length / sock_recv_length (6.3+, attribution.bpf.c; `from` NT_DEBUG_HOOK_TP)
 * and, before 6.3, for TCP at the exits of tcp_sendmsg / tcp_recvmsg (tcp_functions.bpf.c;
 * NT_DEBUG_HOOK_FN), which a tcpdebug record names in its hook.
 */
#ifndef __NT_USER_CALL_BPF_H
#define __NT_USER_CALL_BPF_H

#include "attribution.bpf.h"
#include "tcpdebug.bpf.h"
#include "udp.bpf.h"
#include "skb.bpf.h"

static __always_inline void user_call(const struct sock *sk, int ret, int flags, __u8 req, __u8 oob_req, __u8 from,
				      void *ctx)
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
	if (from == NT_DEBUG_HOOK_FN) { /* TCP's own functions: the UDP path is left out, unverified */
		if (proto != IPPROTO_TCP)
			return;
	} else if (proto == IPPROTO_UDP || proto == IPPROTO_UDPLITE) {
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
		struct seg g = { .payload = ret > 0 ? ret : 0 }; /* the bytes moved; no segment (ok 0) */

		debug_record(sk, cookie, &g, NT_TA_USER, (flags & MSG_OOB) ? oob_req : req, 0, 0, NULL,
			     hook_call(in_task(ctx)), from);
		return; /* debug_record's attribute() already noted the owner */
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

#endif /* __NT_USER_CALL_BPF_H */

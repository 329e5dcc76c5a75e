// SPDX-License-Identifier: GPL-2.0
/* siftr.bpf.c: received TCP segments at tcp_probe (tcp_rcv_established), the input
 * side of siftr's per-packet statistics (providers.md 6) and tcpdebug's input point.
 * The output side is net_dev_queue (ip.bpf.c); the flow state is in siftr.bpf.h.
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

SEC("tp_btf/tcp_probe")
int BPF_PROG(tcp_probe, struct sock *sk, const struct sk_buff *skb)
{
	__u64 cookie = sk->__sk_common.skc_cookie.counter ?: cookie_of(sk); /* set once, then a load */
	struct seg g = {};

	if (cfg.providers & NT_PROV_SIFTR)
		siftr_packet(sk, cookie, skb, 0, ctx);
	if (cfg.providers & NT_PROV_TCPDEBUG) {
		/* tcp_rcv_established: skb->data is the TCP header (direct loads: skb is a trusted argument) */
		struct seg_ref r = { (const struct tcphdr *)skb->data, skb->len };

		read_seg(&g, &r);
		debug_point(sk, cookie, &g, NT_TA_INPUT, PRU_NONE, 0, 0, NULL, in_task(ctx));
	}
	return 0;
}

// SPDX-License-Identifier: GPL-2.0
/* udp.bpf.c: datagrams a UDP socket could not queue (udp_fail_queue_rcv_skb: receive
 * buffer full or a filter's verdict), the udp provider's own tracepoint (providers.md
 * 3). Its datagram and call records come from ip.bpf.c and attribution.bpf.c
 * (udp.bpf.h).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "nettrail.h"
#include "attribution.bpf.h"

/* skb may be NULL: the 2-argument prototype (6.1; 6.12 passes skb) does not pass it. */
static __always_inline void udp_fail(void *ctx, int rc, struct sock *sk, struct sk_buff *skb)
{
	struct nt_header h = {};
	struct nt_event *e = start(&h, sk, NT_EV_UDP_FAIL, in_task(ctx));

	if (!e)
		return;
	e->udp_fail.rc = rc;
	e->udp_fail.rmem_alloc = BPF_CORE_READ(sk, sk_backlog.rmem_alloc.counter);
	e->udp_fail.truesize = skb ? BPF_CORE_READ(skb, truesize) : 0;
	e->udp_fail.rcvbuf = BPF_CORE_READ(sk, sk_rcvbuf);
	e->udp_fail.sk_protocol = BPF_CORE_READ(sk, sk_protocol);
	e->udp_fail._pad[0] = e->udp_fail._pad[1] = 0;
	submit(e);
}

/* One program per prototype; the loader enables the one the kernel's btf_trace_ passes
 * (collector/bpf/variants.py): (rc, sk, skb) on 6.12, (rc, sk) on 6.1. */
SEC("tp_btf/udp_fail_queue_rcv_skb")
int BPF_PROG(udp_fail_queue_rcv_skb, int rc, struct sock *sk, struct sk_buff *skb)
{
	udp_fail(ctx, rc, sk, skb);
	return 0;
}

SEC("tp_btf/udp_fail_queue_rcv_skb")
int BPF_PROG(udp_fail_queue_rcv_skb__2, int rc, struct sock *sk)
{
	udp_fail(ctx, rc, sk, NULL);
	return 0;
}

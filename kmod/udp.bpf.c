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

SEC("tp_btf/udp_fail_queue_rcv_skb")
int BPF_PROG(udp_fail_queue_rcv_skb, int rc, struct sock *sk, struct sk_buff *skb)
{
	struct nt_header h = {};
	struct nt_event *e = start(&h, sk, NT_EV_UDP_FAIL, in_task(ctx));

	if (!e)
		return 0;
	e->udp_fail.rc = rc;
	e->udp_fail.rmem_alloc = BPF_CORE_READ(sk, sk_backlog.rmem_alloc.counter);
	e->udp_fail.truesize = BPF_CORE_READ(skb, truesize);
	e->udp_fail.rcvbuf = BPF_CORE_READ(sk, sk_rcvbuf);
	e->udp_fail.sk_protocol = BPF_CORE_READ(sk, sk_protocol);
	e->udp_fail._pad[0] = e->udp_fail._pad[1] = 0;
	submit(e);
	return 0;
}

// SPDX-License-Identifier: GPL-2.0
/* empty_programs.bpf.c: one empty tp_btf program on each tracepoint nettrail's busy
 * programs use. bench/bench_collect.py attaches them next to a collector: what they
 * cost per run under bpf_stats, at the same hooks in the same transfer, is the floor
 * (the statistics' clock reads, the tracepoint dispatch, cold caches) to set nettrail's
 * own per-run cost against. Names: e_ + the tracepoint (the kernel keeps 15 characters). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

SEC("tp_btf/tcp_probe") int e_tcp_probe(void *ctx) { return 0; }
SEC("tp_btf/net_dev_queue") int e_net_dev_queue(void *ctx) { return 0; }
SEC("tp_btf/netif_receive_skb") int e_netif_receive_skb(void *ctx) { return 0; }
SEC("tp_btf/sock_send_length") int e_sock_send_length(void *ctx) { return 0; }
SEC("tp_btf/sock_recv_length") int e_sock_recv_length(void *ctx) { return 0; }
SEC("tp_btf/inet_sock_set_state") int e_inet_sock_set_state(void *ctx) { return 0; }
SEC("tp_btf/kfree_skb") int e_kfree_skb(void *ctx) { return 0; }
SEC("tp_btf/softirq_entry") int e_softirq_entry(void *ctx) { return 0; }
SEC("tp_btf/softirq_exit") int e_softirq_exit(void *ctx) { return 0; }
/* skb-lifecycle's stage hooks (bench/bench_skb_sample.py) */
SEC("tp_btf/napi_gro_receive_entry") int e_napi_gro_receive_entry(void *ctx) { return 0; }
SEC("tp_btf/netif_rx_entry") int e_netif_rx_entry(void *ctx) { return 0; }
SEC("tp_btf/netif_receive_skb_entry") int e_netif_receive_skb_entry(void *ctx) { return 0; }
SEC("tp_btf/net_dev_start_xmit") int e_net_dev_start_xmit(void *ctx) { return 0; }
SEC("tp_btf/net_dev_xmit") int e_net_dev_xmit(void *ctx) { return 0; }
SEC("tp_btf/skb_copy_datagram_iovec") int e_skb_copy_datagram_iovec(void *ctx) { return 0; }
SEC("tp_btf/consume_skb") int e_consume_skb(void *ctx) { return 0; }

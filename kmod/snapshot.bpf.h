/* SPDX-License-Identifier: GPL-2.0 */
/* snapshot.bpf.h: a TCP socket's control block (struct nt_tcp_snapshot) and a
 * segment's TCP header (struct seg), as siftr and tcpdebug record them: the per-sample
 * cost of both, so read by direct loads where the verifier allows.
 */
#ifndef __NT_SNAPSHOT_BPF_H
#define __NT_SNAPSHOT_BPF_H

#include "maps.bpf.h"
#include "core_fixes.bpf.h"

/* Direct loads (not a probe-read helper call per field: the snapshot is the per-sample
 * cost of siftr and tcpdebug) through a read-only cast, which takes any socket pointer
 * (skb->sk included). The callers pass full TCP sockets only. */
static __always_inline void snapshot(struct nt_tcp_snapshot *s, const struct sock *sk)
{
	const struct tcp_sock *tp = bpf_rdonly_cast(sk, bpf_core_type_id_kernel(struct tcp_sock));
	const struct inet_connection_sock *icsk = &tp->inet_conn;
	__u8 flags = NT_SNAP_VALID;

	s->bytes_acked = tp->bytes_acked;
	s->bytes_received = tp->bytes_received;
	s->snd_cwnd = tp->snd_cwnd;
	s->snd_ssthresh = tp->snd_ssthresh;
	s->snd_wnd = tp->snd_wnd;
	s->rcv_wnd = tp->rcv_wnd;
	s->srtt_us = tp->srtt_us;
	s->mdev_us = tp->mdev_us;
	s->rto_us = CONFIG_HZ ? icsk->icsk_rto * (1000000 / CONFIG_HZ) : 0;
	s->mss_cache = tp->mss_cache;
	s->snd_una = tp->snd_una;
	s->snd_nxt = tp->snd_nxt;
	s->rcv_nxt = tp->rcv_nxt;
	s->rcv_wup = tp->rcv_wup;
	s->snd_wl1 = tp->snd_wl1;
	s->write_seq = tp->write_seq;
	s->copied_seq = tp->copied_seq;
	s->sndbuf = tp->inet_conn.icsk_inet.sk.sk_sndbuf;
	s->rcvbuf = tp->inet_conn.icsk_inet.sk.sk_rcvbuf;
	s->packets_out = tp->packets_out;
	s->sacked_out = tp->sacked_out;
	s->lost_out = tp->lost_out;
	s->retrans_out = tp->retrans_out;
	s->total_retrans = tp->total_retrans;
	s->delivered = tp->delivered;
	s->app_limited = tp->app_limited;
	s->ts_recent = tp->rx_opt.ts_recent;
	s->rxhash = tp->inet_conn.icsk_inet.sk.__sk_common.skc_rxhash;
	s->state = tp->inet_conn.icsk_inet.sk.__sk_common.skc_state;
	s->ca_state = BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state);
	s->retransmits = icsk->icsk_retransmits;
	s->backoff = icsk->icsk_backoff;
	s->snd_wscale = BPF_CORE_READ_BITFIELD(tp, rx_opt.snd_wscale);
	s->rcv_wscale = BPF_CORE_READ_BITFIELD(tp, rx_opt.rcv_wscale);
	if (BPF_CORE_READ_BITFIELD(tp, rx_opt.sack_ok))
		flags |= NT_SNAP_SACK;
	if (BPF_CORE_READ_BITFIELD(tp, rx_opt.wscale_ok))
		flags |= NT_SNAP_WSCALE;
	if (BPF_CORE_READ_BITFIELD(tp, rx_opt.tstamp_ok))
		flags |= NT_SNAP_TSTAMP;
	if (BPF_CORE_READ_BITFIELD(tp, nonagle) & 1)
		flags |= NT_SNAP_NODELAY;
	if (BPF_CORE_READ_BITFIELD(tp, syn_fastopen) || tp->fastopen_rsk)
		flags |= NT_SNAP_FASTOPEN;
	if (tp->ecn_flags & 1)
		flags |= NT_SNAP_ECN;
	s->flags = flags;
	BPF_CORE_READ_STR_INTO(&s->cc_algo, icsk, icsk_ca_ops, name);
}

/* The TCP header of an skb, from the transport offset (output, drop) or skb->data (input). */
struct seg {
	__u32 seq;
	__u32 ack;
	__u32 payload;
	__u16 win;
	__u8 flags;
	__u8 ok;
};

static __always_inline void read_tcphdr(struct seg *g, const struct tcphdr *th, __u32 hdr_to_end)
{
	struct tcphdr t;
	__u32 doff;

	if (bpf_probe_read_kernel(&t, sizeof(t), th))
		return;
	doff = t.doff * 4;
	g->seq = bpf_ntohl(t.seq);
	g->ack = bpf_ntohl(t.ack_seq);
	g->win = bpf_ntohs(t.window);
	g->flags = ((__u8 *)&t)[13];
	g->payload = hdr_to_end > doff ? hdr_to_end - doff : 0;
	g->ok = 1;
}

/* Where a segment's TCP header is (NULL: nowhere) and how many bytes run from it to the
 * skb's end: the per-packet path needs only the payload length, a sample the header. */
struct seg_ref {
	const struct tcphdr *th;
	__u32 hdr_to_end;
};

static __always_inline void read_seg(struct seg *g, const struct seg_ref *r)
{
	if (r->th)
		read_tcphdr(g, r->th, r->hdr_to_end);
}

/* The payload length from the header's data offset: one direct load, no helper call. */
static __always_inline __u32 seg_payload(const struct seg_ref *r)
{
	const __u8 *t;
	__u32 doff;

	if (!r->th)
		return 0;
	t = bpf_rdonly_cast(r->th, bpf_core_type_id_kernel(struct tcphdr));
	doff = (t[12] >> 4) * 4;
	return r->hdr_to_end > doff ? r->hdr_to_end - doff : 0;
}

/* Output side: header at head + transport_header; payload from skb->len. */
static __always_inline struct seg_ref seg_ref_at_transport(const struct sk_buff *skb)
{
	unsigned char *head = skb->head;
	__u16 th_off = skb->transport_header;
	__u32 data_off = skb->data - head;
	struct seg_ref r = {};

	if (th_off == 0xffff || th_off < data_off)
		return r;
	r.th = (const struct tcphdr *)(head + th_off);
	r.hdr_to_end = skb->len - (th_off - data_off);
	return r;
}

/* A dropped segment (tcpdebug's debug-drop): tcp_data_queue() pulls the TCP header before
 * its drops (TCP_OLD_DATA, TCP_OFOMERGE, TCP_ZEROWINDOW, ...), so skb->data may be past the
 * header, which stays in the buffer at the transport offset: the bytes from the header to
 * the skb's end count from there, before or after skb->data. */
static __always_inline void seg_at_drop(struct seg *g, const struct sk_buff *skb)
{
	unsigned char *head = BPF_CORE_READ(skb, head);
	__u16 th_off = BPF_CORE_READ(skb, transport_header);
	__u32 data_off = BPF_CORE_READ(skb, data) - head;
	__u32 len = BPF_CORE_READ(skb, len);

	if (th_off == 0xffff || th_off > data_off + len)
		return;
	read_tcphdr(g, (const struct tcphdr *)(head + th_off), len + data_off - th_off);
}

#endif /* __NT_SNAPSHOT_BPF_H */

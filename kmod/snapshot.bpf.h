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
 * (skb->sk included); a probe read per field in the compat object (NT_RD,
 * core_fixes.bpf.h). The callers pass full TCP sockets only. */
static __always_inline void snapshot(struct nt_tcp_snapshot *s, const struct sock *sk)
{
	const struct tcp_sock *tp = NT_CAST(sk, struct tcp_sock);
	const struct inet_connection_sock *icsk = &tp->inet_conn;
	__u8 flags = NT_SNAP_VALID;

	s->bytes_acked = NT_RD(tp, bytes_acked);
	s->bytes_received = NT_RD(tp, bytes_received);
	s->snd_cwnd = NT_RD(tp, snd_cwnd);
	s->snd_ssthresh = NT_RD(tp, snd_ssthresh);
	s->snd_wnd = NT_RD(tp, snd_wnd);
	s->rcv_wnd = NT_RD(tp, rcv_wnd);
	s->srtt_us = NT_RD(tp, srtt_us);
	s->mdev_us = NT_RD(tp, mdev_us);
	s->rto_us = CONFIG_HZ ? NT_RD(icsk, icsk_rto) * jiffy_us() : 0;
	s->mss_cache = NT_RD(tp, mss_cache);
	s->snd_una = NT_RD(tp, snd_una);
	s->snd_nxt = NT_RD(tp, snd_nxt);
	s->rcv_nxt = NT_RD(tp, rcv_nxt);
	s->rcv_wup = NT_RD(tp, rcv_wup);
	s->snd_wl1 = NT_RD(tp, snd_wl1);
	s->write_seq = NT_RD(tp, write_seq);
	s->copied_seq = NT_RD(tp, copied_seq);
	s->sndbuf = NT_RD(tp, inet_conn.icsk_inet.sk.sk_sndbuf);
	s->rcvbuf = NT_RD(tp, inet_conn.icsk_inet.sk.sk_rcvbuf);
	s->packets_out = NT_RD(tp, packets_out);
	s->sacked_out = NT_RD(tp, sacked_out);
	s->lost_out = NT_RD(tp, lost_out);
	s->retrans_out = NT_RD(tp, retrans_out);
	s->total_retrans = NT_RD(tp, total_retrans);
	s->delivered = NT_RD(tp, delivered);
	s->app_limited = NT_RD(tp, app_limited);
	s->ts_recent = NT_RD(tp, rx_opt.ts_recent);
	s->rxhash = NT_RD(tp, inet_conn.icsk_inet.sk.__sk_common.skc_rxhash);
	s->state = NT_RD(tp, inet_conn.icsk_inet.sk.__sk_common.skc_state);
	s->ca_state = NT_RD_BITFIELD(icsk, icsk_ca_state);
	s->retransmits = NT_RD(icsk, icsk_retransmits);
	s->backoff = NT_RD(icsk, icsk_backoff);
	s->snd_wscale = NT_RD_BITFIELD(tp, rx_opt.snd_wscale);
	s->rcv_wscale = NT_RD_BITFIELD(tp, rx_opt.rcv_wscale);
	if (NT_RD_BITFIELD(tp, rx_opt.sack_ok))
		flags |= NT_SNAP_SACK;
	if (NT_RD_BITFIELD(tp, rx_opt.wscale_ok))
		flags |= NT_SNAP_WSCALE;
	if (NT_RD_BITFIELD(tp, rx_opt.tstamp_ok))
		flags |= NT_SNAP_TSTAMP;
	if (NT_RD_BITFIELD(tp, nonagle) & 1)
		flags |= NT_SNAP_NODELAY;
	if (NT_RD_BITFIELD(tp, syn_fastopen) || NT_RD(tp, fastopen_rsk))
		flags |= NT_SNAP_FASTOPEN;
	if (NT_RD(tp, ecn_flags) & 1)
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
 * skb's end: found only for a sample or a tcpdebug point, never per packet. */
struct seg_ref {
	const struct tcphdr *th;
	__u32 hdr_to_end;
};

static __always_inline void read_seg(struct seg *g, const struct seg_ref *r)
{
	if (r->th)
		read_tcphdr(g, r->th, r->hdr_to_end);
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

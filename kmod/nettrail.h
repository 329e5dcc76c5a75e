/* nettrail.h: every structure shared by the eBPF programs (kmod/ *.bpf.c files) and the
 * collector (collector/bpf/layout.py mirrors these with numpy dtypes; the test
 * tests/test_bpf_layout.py compiles this header and fails when the two drift).
 *
 * Rules: fixed-width types, fields widest first, explicit `_pad` fields, no hidden
 * padding. One section per provider, in translators/ order. Every event that goes
 * through the ring buffer is one `struct nt_event` (a header plus a union of
 * bodies), all the same size, so user space can view a batch as one array.
 */
#ifndef NETTRAIL_H
#define NETTRAIL_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define NT_COMM_LEN 16
#define NT_ADDR_LEN 16
#define NT_CC_LEN 16
#define NT_EV_MAX 32 /* size of the per-type counter arrays (a power of two: reserve() masks with it) */

/* ---- common ------------------------------------------------------------ */

enum nt_event_type {
	NT_EV_STATE = 1,      /* tcp: inet_sock_set_state */
	NT_EV_RETRANSMIT = 2, /* tcp: tcp_retransmit_skb / tcp_retransmit_synack */
	NT_EV_RESET = 3,      /* tcp: tcp_send_reset / tcp_receive_reset */
	NT_EV_CONG = 4,       /* tcp: tcp_cong_state_set */
	NT_EV_DESTROY = 5,    /* tcp: tcp_destroy_sock (final counters) */
	NT_EV_SIFTR = 6,      /* siftr: tcp_probe (in) / net_dev_queue (out), ppl-sampled */
	NT_EV_DEBUG = 7,      /* tcpdebug: input/output/user/drop snapshots */
	NT_EV_FLOW = 8,       /* siftr: exact per-flow counters at tcp_destroy_sock */
	NT_EV_SKB_DROP = 9,   /* skb: kfree_skb with a drop reason */
	NT_EV_UDP_FAIL = 10,  /* udp: udp_fail_queue_rcv_skb (receive queue refused a datagram) */
	NT_EV_IP = 11,        /* ip: net_dev_queue (send) / netif_receive_skb (receive) */
	NT_EV_SKB_STAGE = 12, /* skb: one stage of a buffer's lifecycle */
	NT_EV_UDP = 13,       /* udp: a datagram at the device (send/receive) or a send/recv call */
	NT_EV_IP_FLOW = 14,   /* no event: counters slot of ip-flows (generated = map entries created) */
	NT_EV_IP_UNCOUNTED = 15, /* no event: generated = packets ip-flows could not count (no entry) */
	NT_EV_LIFECYCLE = 16, /* tcp --tcp-fold: a socket's folded states and final counters (struct nt_fold) */
};

enum nt_ctx { NT_CTX_UNKNOWN = 0, NT_CTX_TASK = 1, NT_CTX_SOFTIRQ = 2 };
enum nt_attribution { NT_ATTR_NONE = 0, NT_ATTR_CURRENT = 1, NT_ATTR_OWNER = 2 };

/* Provider bits in nt_config.providers. */
#define NT_PROV_TCP 0x1
#define NT_PROV_SIFTR 0x2
#define NT_PROV_TCPDEBUG 0x4
#define NT_PROV_SKB 0x8
#define NT_PROV_UDP 0x10
#define NT_PROV_IP 0x20
#define NT_PROV_SKB_LIFE 0x40 /* skb lifecycles; NT_PROV_SKB alone is drops only (always-on mode) */
#define NT_PROV_IP_FLOWS 0x80 /* exact per-flow ip counters (map ip_flows); NT_PROV_IP: a record per packet */
#define NT_PROV_UDP_CALLS 0x100 /* udp's always-on mode: the call records only (NT_PROV_UDP adds the device's) */
#define NT_PROV_SIFTR_POLL 0x200 /* siftr's always-on mode: each socket's control block polled (siftr_poll.bpf.c) */

/* Filters and settings fixed at load time: the only member of .rodata (`cfg`). */
struct nt_config {
	__u64 cgroup_id;        /* 0 = any */
	__u64 drop_reasons[2];  /* bitmap of enum skb_drop_reason values that are TCP_* */
	__u32 tgid;             /* 0 = any; matched against the attributed process */
	__u32 netns;            /* 0 = any; network namespace inode */
	__u32 ppl;              /* SIFTR: one sample per ppl packets per flow (>= 1) */
	__u32 providers;        /* NT_PROV_* bits */
	__u32 exclude_tgid;     /* 0 = none; the collector itself, so it does not trace its own shipping */
	__u32 drop_rate;        /* skb: drop events per second per CPU, 0 = all (the counts stay exact) */
	__u32 ip_sample;        /* ip-flows: an ip record for one packet in N of each flow, 0 = none */
	__u32 skb_sample;       /* skb-lifecycle: follow one buffer in N (per CPU, at its first sighting), 0/1 = all */
	__s32 preempt_from_rq;  /* in_task(): this CPU's preempt count, bytes from its struct rq; 0 = use the softirq words */
	__u16 port;             /* 0 = any; local or remote port */
	__u8 addr_family;       /* 0 = any, 2 = AF_INET, 10 = AF_INET6 */
	__u8 skb_windowed;      /* skb-lifecycle --skb-window: lifetimes start only while `skb_window` is open */
	__u8 addr[NT_ADDR_LEN]; /* local or remote address (IPv4 in the first 4 bytes) */
	__u8 udp_calls_from;    /* where udp call records come from: NT_UDP_FROM_* */
	__u8 _pad[3];
	__u32 fold_window_ms;   /* tcp --tcp-fold: 0 = off; a socket folded longer is flushed by the poll */
};

/* nt_config.udp_calls_from: sock_send_length/sock_recv_length (6.3+, attribution.bpf.c);
 * before 6.3 the exits of the UDP protocol's send/recv functions (udp_functions.bpf.c),
 * or where the kernel refuses those, of every system call (udp_syscalls.bpf.c). */
#define NT_UDP_FROM_SOCK 0
#define NT_UDP_FROM_FUNCTIONS 1
#define NT_UDP_FROM_SYSCALLS 2

/* Per-CPU counters (map `counters`), indexed by enum nt_event_type. */
struct nt_counters {
	__u64 generated[NT_EV_MAX]; /* events that passed the filters */
	__u64 lost[NT_EV_MAX];      /* ring-buffer reservation failures */
};

/* Map `owners`: socket cookie -> who used the socket last in task context. */
struct nt_owner {
	__u64 cgroup_id;
	__u64 first_ns; /* first sighting of the socket by nettrail */
	__u32 pid;
	__u32 tgid;
	__u32 uid;
	__u32 gid;
	char comm[NT_COMM_LEN];
};

/* Map `listeners` key: attribution of passive children comes from their listener. */
struct nt_listen_key {
	__u32 netns;
	__u16 port;
	__u16 _pad;
};

/* Header of every event: identity, attribution and the 4-tuple (local first). */
struct nt_header {
	__u64 ts_ns; /* bpf_ktime_get_ns() */
	__u64 cookie; /* socket cookie, 0 = no socket */
	__u64 cgroup_id;
	__u32 pid;
	__u32 tgid;
	__u32 uid;
	__u32 gid;
	__u32 netns;
	__u32 cpu;
	__u16 type;  /* enum nt_event_type */
	__u16 sport; /* local port */
	__u16 dport; /* remote port */
	__u16 _pad;
	__u8 ctx;         /* enum nt_ctx */
	__u8 attribution; /* enum nt_attribution */
	__u8 family;      /* AF_INET 2, AF_INET6 10, 0 unknown */
	__u8 _pad2;
	char comm[NT_COMM_LEN];
	__u8 saddr[NT_ADDR_LEN]; /* local address */
	__u8 daddr[NT_ADDR_LEN]; /* remote address */
	__u8 _pad3[4];
};

/* ---- tcp provider ------------------------------------------------------- */

struct nt_state_body {
	__u32 sk_err;
	__u8 oldstate; /* Linux enum tcp_state */
	__u8 newstate;
	__u8 flags;    /* NT_STATE_* */
	__u8 _pad;
};
/* nt_state_body.flags, on an X -> CLOSE: the peer's FIN had come (SOCK_DONE, set by
 * tcp_fin()). A FIN_WAIT_1/2 or CLOSING socket handed to a timewait mini-socket with it is in
 * TIME_WAIT; without it (an orphan whose FIN was acked, tcp_time_wait(sk, TCP_FIN_WAIT2))
 * the mini-socket waits in FIN_WAIT_2, as ss shows it. */
#define NT_STATE_FIN_RCVD 0x01

struct nt_retransmit_body {
	__u32 seq;
	__u32 end_seq;
	__s32 err;
	__u16 segs;     /* tcp_skb_pcount: what TcpRetransSegs adds */
	__u8 tcp_flags;
	__u8 state;     /* Linux enum tcp_state */
	__u8 ca_state;
	__u8 synack;    /* 1: tcp_retransmit_synack */
	__u8 timer;     /* icsk_pending then: ICSK_TIME_LOSS_PROBE (5) inside tcp_send_loss_probe (a TLP) */
	__u8 _pad;
};

struct nt_reset_body {
	__u32 reason; /* enum sk_rst_reason (send) */
	__u8 state;   /* Linux enum tcp_state, 0 without a socket */
	__u8 sender;  /* 0 local, 1 peer */
	__u8 active;  /* 1: no provoking segment (abort, SO_LINGER 0) */
	__u8 has_sock;
};

struct nt_cong_body {
	__u32 snd_cwnd;     /* segments */
	__u32 snd_ssthresh; /* segments */
	__u32 mss;
	__u8 old_ca_state;
	__u8 new_ca_state;
	__u8 _pad[2];
};

struct nt_destroy_body {
	__u64 bytes_acked;
	__u64 bytes_received;
	__u64 first_ns; /* owner map first sighting, 0 unknown */
	__u32 segs_in;
	__u32 segs_out;
	__u32 total_retrans;
	__u8 state;
	__u8 _pad[3];
};

/* Map `closed` value (by cookie): the 4-tuple and counters of a socket at its change to
 * CLOSE. tcp_disconnect() (an abort: SO_LINGER 0, or a reset) zeroes the peer port, the
 * local address and the counters right after that change, before the congestion-state
 * reset, the DETACH and the destroy report on the socket. */
struct nt_closed {
	__u64 bytes_acked;
	__u64 bytes_received;
	__u64 bytes_sent; /* siftr's final bytes_out */
	__u32 segs_in;
	__u32 segs_out;
	__u32 total_retrans;
	__u16 sport;
	__u16 dport;
	__u8 family;
	__u8 _pad[7];
	__u8 saddr[NT_ADDR_LEN];
	__u8 daddr[NT_ADDR_LEN];
};

/* --tcp-fold (docs/record-path.md, step 2): a socket's state changes and congestion-state
 * changes folded in socket storage (map `folds`, kmod/fold.bpf.h) instead of one ring event
 * each, emitted as one NT_EV_LIFECYCLE at tcp_destroy_sock, or earlier by siftr-poll's
 * iterator (partial) once the socket is older than the fold window, after which its changes
 * stream as without the fold (streaming). 96 bytes: 12 changes fit a short connection's 5
 * to 6 per end with room for a retried handshake. */
#define NT_FOLD_STATES 10 /* a short connection makes 5 (2 a listener); more: flushed, partial */
#define NT_FOLD_STATE 0x0f /* in states[]: the new Linux enum tcp_state */
#define NT_FOLD_TASK 0x10  /* in states[]: the change ran in task context (ctx "task") */
#define NT_FOLD_ERR 0x20   /* in states[]: sk_err was set (an X -> CLOSE that is no TIME_WAIT) */
#define NT_FOLD_FIN 0x40   /* in states[]: NT_STATE_FIN_RCVD (an X -> CLOSE into TIME_WAIT, not FIN_WAIT_2) */

struct nt_fold {
	__u64 born_ns;                   /* the first change folded: the times below count from it */
	__u32 state_us[NT_FOLD_STATES];  /* each change, microseconds after born_ns */
	__u32 cong_us;                   /* the last congestion-state change, microseconds after born_ns */
	__u32 cong_changes;              /* congestion-state changes folded */
	__u32 snd_cwnd;                  /* at the last congestion-state change, segments */
	__u32 snd_ssthresh;              /* segments */
	__u32 mss;
	__u8 states[NT_FOLD_STATES];     /* NT_FOLD_STATE | NT_FOLD_TASK | NT_FOLD_ERR | NT_FOLD_FIN */
	__u8 first_old;                  /* the first change's old state (later ones: the previous new) */
	__u8 nstates;                    /* changes in states[] */
	__u8 first_ca;                   /* the first congestion change's old ca_state */
	__u8 last_old_ca;                /* the last congestion change's old and new ca_state */
	__u8 last_ca;
	__u8 cong_ctx;                   /* enum nt_ctx of the last congestion change */
	__u8 streaming;                  /* 1: flushed; its changes go to the ring one by one */
	__u8 cong_at;                    /* state changes folded before the last congestion change */
	/* resets and retransmissions stay records of their own; the fold sums them up too */
	__u8 resets;                     /* resets sent or received (saturates at 255) */
	__u8 reset_how;                  /* the last: NT_FOLD_RST_PEER | the socket's Linux state then */
	__u16 retrans;                   /* retransmissions (tcp_retransmit_skb; saturates at 65535) */
	__u16 _pad_fold;
	__u32 retrans_first_us;          /* the first and the last, microseconds after born_ns */
	__u32 retrans_last_us;
	__u32 reset_us;                  /* the last reset, microseconds after born_ns */
};
#define NT_FOLD_RST_PEER 0x80 /* in reset_how: received from the peer (else sent); low bits: the state */

/* NT_EV_LIFECYCLE body: the fold and what NT_EV_DESTROY and siftr's NT_EV_FLOW carry at the
 * socket's end (at a flush: the counters then, no flow). */
struct nt_lifecycle_body {
	struct nt_fold fold;
	__u64 bytes_acked;
	__u64 bytes_received;
	__u64 first_ns;     /* owner map first sighting, 0 unknown (nt_destroy_body.first_ns) */
	__u64 bytes_sent;   /* siftr's final bytes_out (has_flow) */
	__u64 flow_samples; /* siftr's final flow: samples and skbs (has_flow) */
	__u64 flow_skbs;
	__u32 segs_in;
	__u32 segs_out;
	__u32 total_retrans;
	__u8 state;         /* the socket's state at the emission */
	__u8 partial;       /* 1: flushed by the poll, the socket lives on and streams */
	__u8 has_flow;      /* siftr (or siftr-poll) followed it: the flow counters are in */
	__u8 _pad_tail;
};

/* ---- siftr provider ----------------------------------------------------- */

#define NT_SNAP_SACK 0x01
#define NT_SNAP_WSCALE 0x02
#define NT_SNAP_TSTAMP 0x04
#define NT_SNAP_NODELAY 0x08
#define NT_SNAP_FASTOPEN 0x10
#define NT_SNAP_ECN 0x20
#define NT_SNAP_VALID 0x80 /* a full tcp_sock was read */

/* The control block as SIFTR and tcpdebug need it (raw Linux units). */
struct nt_tcp_snapshot {
	__u64 bytes_acked;
	__u64 bytes_received;
	__u32 snd_cwnd;     /* segments */
	__u32 snd_ssthresh; /* segments */
	__u32 snd_wnd;
	__u32 rcv_wnd;
	__u32 srtt_us;      /* tcp_sock.srtt_us: << 3 */
	__u32 mdev_us;      /* tcp_sock.mdev_us: << 2 */
	__u32 rto_us;
	__u32 mss_cache;
	__u32 snd_una;
	__u32 snd_nxt;
	__u32 rcv_nxt;
	__u32 rcv_wup;
	__u32 snd_wl1;
	__u32 write_seq;
	__u32 copied_seq;
	__u32 sndbuf;
	__u32 rcvbuf;
	__u32 packets_out;
	__u32 sacked_out;
	__u32 lost_out;
	__u32 retrans_out;
	__u32 total_retrans;
	__u32 delivered;
	__u32 app_limited;
	__u32 ts_recent;
	__u32 rxhash;
	__u8 state;    /* Linux enum tcp_state */
	__u8 ca_state;
	__u8 snd_wscale;
	__u8 rcv_wscale;
	__u8 flags;    /* NT_SNAP_* */
	__u8 retransmits;
	__u8 backoff;
	__u8 _pad;
	char cc_algo[NT_CC_LEN];
};

struct nt_siftr_body {
	struct nt_tcp_snapshot snap;
	__u32 th_seq;
	__u32 th_ack;
	__u32 data_sz;
	__u8 direction; /* 0 in, 1 out, 2 polled (no packet: th_seq, th_ack, data_sz 0) */
	__u8 _pad_tail[3];
};

/* Map `flow_slots` and `flows` value and NT_EV_FLOW body: exact counters whatever ppl
 * is. 64 bytes: a flow's per-packet counting touches one cache line of flow_slots.
 * packets_* and bytes_* are the socket's own tcp_info counters, copied from its
 * tcp_sock (what `ss -tin` shows): at each packet siftr sees while the flow runs, read
 * afresh at tcp_destroy_sock for the final record. u32 packets: so are segs_in/segs_out. */
struct nt_flow {
	__u64 flow_cookie; /* the socket cookie counted here; in flow_slots, 0: a free slot */
	__u32 packets_in;  /* tcp_sock.segs_in: segments received, max(1, gso_segs) per skb (ss segs_in) */
	__u32 packets_out; /* tcp_sock.segs_out: segments sent, retransmissions included (ss segs_out) */
	__u64 bytes_in;    /* tcp_sock.bytes_received: rcv_nxt's advance, a FIN counts 1 (ss bytes_received) */
	__u64 bytes_out;   /* tcp_sock.bytes_sent: payload sent, retransmissions included (ss bytes_sent) */
	__u64 samples;     /* buffer k of the flow (k = skbs) was sampled if k % ppl == 0 */
	__u64 first_ns;    /* admission (first packet) */
	__u64 last_ns;     /* the last sample, not the last packet: no clock read per packet */
	__u64 skbs;        /* buffers siftr saw: tcp_probe (in) and net_dev_queue (out) */
};

/* Map `polled` value: what siftr-poll last sampled of a socket, so a poll that finds
 * nothing moved and nothing waiting emits nothing. */
struct nt_polled {
	__u32 snd_una;
	__u32 snd_nxt;
	__u32 rcv_nxt;
	__u32 snd_cwnd;
	__u32 snd_wnd;
	__u32 rcv_wnd;
	__u32 srtt_us;
	__u8 state;
	__u8 ca_state;
	__u8 sampled; /* 0 until the first sample */
	__u8 _pad;
};

/* ---- tcpdebug provider -------------------------------------------------- */

enum nt_debug_point { NT_TA_INPUT = 0, NT_TA_OUTPUT = 1, NT_TA_USER = 2, NT_TA_RESPOND = 3, NT_TA_DROP = 4 };

struct nt_debug_body {
	struct nt_tcp_snapshot snap;
	__u32 th_seq;
	__u32 th_ack;
	__u32 payload_len;
	__u32 drop_reason; /* enum skb_drop_reason (drop point) */
	__u16 th_win;
	__u8 th_flags;
	__u8 has_seg;   /* th_* are valid */
	__u8 direction; /* enum nt_debug_point */
	__u8 prureq;    /* PRU_* (user point), 0xff none */
	__u8 approx;    /* 1: the PRU_* mapping is ambiguous */
	__u8 user_hook; /* SEND/RCVD: NT_DEBUG_HOOK_TP or NT_DEBUG_HOOK_FN; payload_len is then the call's bytes */
};
/* nt_debug_body.user_hook: the call seen at sock_send_length / sock_recv_length (6.3+), or
 * before 6.3 at the exit of tcp_sendmsg / tcp_recvmsg (fexit, tcp_functions.bpf.c) */
#define NT_DEBUG_HOOK_TP 0
#define NT_DEBUG_HOOK_FN 1

/* ---- ip provider --------------------------------------------------------- */

/* One IPv4/IPv6 packet (a GSO skb stands for gso_segs wire packets); the header's
 * 4-tuple is the packet's, source first; cookie/attribution from skb->sk when sent. */
#define NT_IP6_EXT_LEN 48 /* bounded copy: hop-by-hop + destination options + the L4 ports fit */

struct nt_ip_body {
	__u32 if_index;
	__u32 flow_label; /* IPv6 */
	__u32 skb_len;   /* bytes from the network header to the skb's end: the length of a GSO/BIG TCP skb */
	__u16 length;    /* IPv4 total length (0 above 64 KiB); IPv6 payload length + 40, modulo 2^16 */
	__u16 ident;     /* IPv4 */
	__u16 frag_off;  /* IPv4 flags and offset, host order */
	__u16 checksum;  /* IPv4 header checksum */
	__u16 gso_segs;
	__u16 gso_size;
	__u16 dev_flags; /* net_device flags (IFF_LOOPBACK 0x8) */
	__u8 direction;  /* 0 receive, 1 send */
	__u8 version;
	__u8 header_length; /* bytes (IPv6: the fixed 40) */
	__u8 protocol;      /* IPv4 protocol / IPv6 next header */
	__u8 ttl;           /* or hop limit */
	__u8 tos;           /* or traffic class */
	__u8 _pad[4];
	char if_name[NT_COMM_LEN];
	__u8 ext[NT_IP6_EXT_LEN]; /* IPv6: raw bytes after the fixed header (extension headers are walked in user space) */
};

/* Map `ip_flows` (LRU, bounded): exact counts per (netns, interface, direction, 5-tuple).
 * Entries are never deleted by the collector, so entries created (counters slot
 * NT_EV_IP_FLOW) minus entries present = entries the LRU evicted. */
struct nt_ip_flow_key {
	__u32 netns;
	__u32 if_index;
	__u16 sport;     /* 0 unless TCP/UDP/UDP-Lite */
	__u16 dport;
	__u8 version;    /* 4 or 6 */
	__u8 protocol;   /* IPv4 protocol / IPv6 next header */
	__u8 direction;  /* 0 receive, 1 send */
	__u8 _pad;
	__u8 saddr[NT_ADDR_LEN];
	__u8 daddr[NT_ADDR_LEN];
};

struct nt_ip_flow {
	__u64 packets;  /* skbs at the device (a GSO skb counts once, as tcpdump sees it) */
	__u64 bytes;    /* IP bytes: from the network header to the end of the skb */
	__u64 samples;  /* ip records emitted for this entry (cfg.ip_sample) */
	__u64 first_ns; /* creation: a new value here means the entry was evicted and recreated */
	__u64 last_ns;  /* first_ns + whole jiffies since: the last packet to a jiffy (no clock read per packet) */
	__u64 first_jiffies;
};

/* Map `ip_slots`: ip-flows' per-CPU cache in front of `ip_flows`, NT_IP_SLOTS slots per
 * CPU at cpu * NT_IP_SLOTS + a hash of the key. A packet whose flow holds its CPU's slot
 * is counted there without the LRU lookup (a hash of 48 bytes, its bucket and its
 * element: cold lines after each bulk copy); a packet whose flow does not is counted in
 * `ip_flows` and its flow takes the slot, the previous flow's counts moved into its
 * entry. A flow's count is its entry's plus those of the slots holding its key with the
 * entry's first_ns (collector/bpf/source.py). Only its own CPU writes a slot. 128 bytes:
 * the key and the counters a hit adds to share the first cache line. */
#define NT_IP_SLOTS_SHIFT 10
#define NT_IP_SLOTS (1 << NT_IP_SLOTS_SHIFT) /* per CPU */

struct nt_ip_slot {
	struct nt_ip_flow_key key; /* version 0: a free slot */
	__u64 packets;             /* since the flow took the slot, not yet in its entry */
	__u64 bytes;
	__u64 last_ns;       /* as nt_ip_flow.last_ns */
	__u64 first_ns;      /* the entry's: counts go to that entry only, not to a new one after an eviction */
	__u64 first_jiffies; /* the entry's */
	__u64 seq;           /* odd while the kernel moves the counts to the entry and changes the key */
	__u64 _pad[4];
};

/* Map `frag_ports` key: an IPv4 datagram being fragmented or reassembled. The value is its
 * ports (sport << 16 | dport) from its first fragment, for the later ones, which have none
 * in their headers: filters and ip-flows keep them with their datagram. */
struct nt_frag_key {
	__u32 netns;
	__u32 saddr;
	__u32 daddr;
	__u16 ident;
	__u8 protocol;
	__u8 direction; /* 0 receive, 1 send: loopback sees each fragment leave and arrive in turn */
};

/* ---- udp provider -------------------------------------------------------- */

struct nt_udp_fail_body {
	__s32 rc;         /* what queueing returned (-ENOMEM: receive buffer full) */
	__u32 rmem_alloc; /* receive memory charged to the socket */
	__u32 truesize;   /* of the datagram that did not fit */
	__u32 rcvbuf;     /* sk_rcvbuf */
	__u16 sk_protocol;
	__u8 _pad[2];
};

/* A datagram (call = 0: from its header at net_dev_queue / netif_receive_skb, 4-tuple
 * source first) or a send/recv call on a UDP socket (call = NT_UDP_CALL_*: where it was
 * seen, 4-tuple local first). */
#define NT_UDP_CALL_SOCK 1 /* sock_send_length / sock_recv_length (6.3+) */
#define NT_UDP_CALL_TO 2   /* sendto / recvfrom */
#define NT_UDP_CALL_MSG 3  /* sendmsg / recvmsg */
#define NT_UDP_CALL_MMSG 4 /* sendmmsg / recvmmsg: a record per message */
#define NT_UDP_CALL_FN 5   /* fexit of udp_sendmsg / udp_recvmsg / udpv6_sendmsg / udpv6_recvmsg */
struct nt_udp_body {
	__s32 ret;       /* call: bytes moved or -errno */
	__u16 length;    /* UDP length field (header + data) */
	__u16 checksum;
	__u16 gso_segs;
	__u8 direction;  /* 0 receive, 1 send */
	__u8 call;       /* 0 device, else where the call was seen: NT_UDP_CALL_* */
	__u8 protocol;   /* 17 UDP, 136 UDP-Lite; IPv6: an extension header's number (walked in user space) */
	__u8 _pad[3];
	char if_name[NT_COMM_LEN];
	__u8 ext[NT_IP6_EXT_LEN]; /* IPv6 with extension headers: raw bytes after the fixed header */
};

/* Map `udp_flows`: exact counts per wire direction (source first), whatever is sampled. */
struct nt_udp_flow_key {
	__u32 netns;
	__u16 sport;
	__u16 dport;
	__u8 family;
	__u8 protocol;
	__u8 _pad[2];
	__u8 saddr[NT_ADDR_LEN];
	__u8 daddr[NT_ADDR_LEN];
};

struct nt_udp_flow {
	__u64 packets_out; /* seen leaving (net_dev_queue) */
	__u64 bytes_out;   /* UDP payload */
	__u64 packets_in;  /* seen arriving (netif_receive_skb) */
	__u64 bytes_in;
};

/* ---- skb provider -------------------------------------------------------- */

/* Map `drops` key: exact drop counts, whatever the event rate limit lets through. */
struct nt_drop_key {
	__u64 location; /* kernel address of the caller that dropped it */
	__u32 reason;   /* enum skb_drop_reason */
	__u16 protocol; /* ethertype, host order */
	__u16 _pad;
};

/* Map `drop_budget` value (per CPU): the drop-event rate limiter. */
struct nt_drop_budget {
	__u64 window_ns;
	__u64 used;
};

/* The header's 4-tuple is the packet's, source first. uid 0: the buffer was not tracked. */
struct nt_skb_drop_body {
	__u64 location;
	__u64 skb_uid;
	__u64 since_first_ns;
	__u32 reason;
	__u32 len;
	__u32 data_len;
	__u32 truesize;
	__u32 mark;
	__u32 if_index;
	__u32 skb_gen;
	__u16 protocol; /* ethertype, host order */
	__u16 data_off; /* skb->data - skb->head */
	__u8 l4_proto;  /* IP protocol / IPv6 next header, 0 unknown */
	__u8 pkt_type;
	__u8 cloned;
	__u8 nr_frags;
	char if_name[NT_COMM_LEN];
	__u8 _pad[4];
};

/* Stages of a buffer's life (providers.md 7.2). */
enum nt_skb_stage {
	NT_SKB_RX_FIRST = 0,   /* netif_receive_skb: first sighting of a received buffer */
	NT_SKB_TX_FIRST = 1,   /* net_dev_queue: first sighting of a sent buffer */
	NT_SKB_RX = 2,         /* netif_receive_skb of a tracked buffer (loopback: the sent one) */
	NT_SKB_XMIT_START = 3, /* net_dev_start_xmit */
	NT_SKB_XMIT = 4,       /* net_dev_xmit, with the driver's return code */
	NT_SKB_COPY = 5,       /* skb_copy_datagram_iovec: data copied to user space */
	NT_SKB_CONSUME = 6,    /* consume_skb: normal end */
	NT_SKB_LAST_SEEN = 7,  /* the address was reused without an observed free */
	NT_SKB_QUEUE = 8,      /* net_dev_queue of a tracked buffer (forwarded) */
	/* inferred at sock_recv_length (no tracepoint where the kernel does it): */
	NT_SKB_COPY_INFERRED = 9,     /* a datagram copied without skb_copy_datagram_iovec (UDP linear copy) */
	NT_SKB_CONSUME_INFERRED = 10, /* a fully read buffer freed by skb_attempt_defer_free / __kfree_skb */
	/* first sighting of a received buffer at a receive entry hook (whichever first; a
	 * buffer sent on this host, loopback or veth, keeps its lifetime and gets none): */
	NT_SKB_RX_FIRST_GRO = 11,   /* napi_gro_receive_entry (NAPI drivers, veth with GRO) */
	NT_SKB_RX_FIRST_NETIF = 12, /* netif_rx_entry (veth without GRO, backlog drivers) */
	NT_SKB_RX_FIRST_ENTRY = 13, /* netif_receive_skb_entry (drivers calling it directly) */
};

/* Map `skbs` value: identity of a tracked buffer lifetime, keyed by its address. The
 * header (4-tuple, socket, attribution) is the first sighting's; filters apply there. */
struct nt_skb_id {
	struct nt_header hdr;
	__u64 uid;
	__u64 head;    /* skb->head at first sighting: a new head means a new buffer */
	__u64 prev_ns; /* time of the previous stage */
	__u32 gen;
	__u32 copied;  /* bytes read by recvmsg calls that returned (not peeks), for the inferred consume */
	__u8 last_stage;
	__u8 _pad[3];
	__u32 last_len; /* skb->len at the last stage emitted: last-seen reports it, not a reusing buffer's */
};

/* Map `skb_skip_slots` value: a buffer --skb-sample N chose not to follow, first seen on
 * another device than loopback, remembered so that its later first-sighting hooks (a
 * veth peer's netif_receive_skb, a forward's queue) see the same lifetime and neither
 * count it again nor start following it halfway. One slot per hash of the address. */
#define NT_SKB_SKIP_SLOTS 65536
struct nt_skb_skip {
	__u64 addr;    /* the buffer's address (0: free slot) */
	__u64 head;    /* skb->head at first sighting, as nt_skb_id.head */
	__u8 last_stage; /* the last first-sighting hook's stage, for skb_same_life() */
	__u8 _pad[7];
};

/* Map `skb_follow` value: how many followed lifetimes (entries of `skbs`) may sit at the
 * addresses of each hash slot, and how many tasks have reads waiting in `skb_reads`. Every
 * hook of a buffer asks it before any hash lookup: a zero says for certain that no
 * followed lifetime is at the address, and it is one load from 4 KiB that stay in the
 * cache (a followed buffer is one in N, so few slots are taken at a time). Counted up
 * when an entry is made, down when one is deleted (an entry the LRU evicts is never
 * counted down: its slot then only costs a lookup that misses). */
#define NT_SKB_FOLLOW_SLOTS 1024
struct nt_skb_follow {
	__u32 reads; /* entries of `skb_reads`: a receive call that copied no followed buffer has none */
	__u32 _pad;
	__u32 n[NT_SKB_FOLLOW_SLOTS];
};

/* Map `skb_sampling` value (per CPU): exact counts beside the sampled lifecycles. */
struct nt_skb_sampling {
	__u64 seen;    /* buffer lifetimes that started (passed the filters), followed or not */
	__u64 sampled; /* of them, followed: one in each block of cfg.skb_sample on each CPU */
	__u32 pick;    /* the followed one's place in the current block (random, chosen at its start) */
	__u32 left;    /* lifetimes the current block still takes (a countdown: no division per buffer) */
};

/* Map `skb_window` value (--skb-window): nonzero between windows. The collector attaches
 * skb-lifecycle's hooks for a window and detaches them after it; a hook another provider
 * keeps attached (net_dev_queue for ip-flows) starts no lifetime while it is closed, so
 * the counts beside the samples are those of the windows on every set of providers. */
struct nt_skb_window {
	__u32 closed;
};

/* Map `skb_reads` value: buffers skb_copy_datagram_iovec copied during this task's
 * recvmsg call, settled at its sock_recv_length (a peek consumes nothing). */
#define NT_SKB_READS 16
struct nt_skb_read {
	__u64 addr;
	__u64 uid;
	__u32 len;       /* bytes copied */
	__u32 skb_len;   /* skb->len then: copied in total, the buffer is used up */
	__u32 alloc_cpu; /* skb->alloc_cpu: another CPU than the reader's defers the free there */
	__u32 _pad;
};
struct nt_skb_reads {
	struct nt_skb_read r[NT_SKB_READS];
	__u32 n;
	__u32 _pad;
};

/* Map `udp_rxq`: received datagrams in arrival order per (netns, local port), so a
 * recvmsg's sock_recv_length can name the buffer it consumed (providers.md 9.2). */
struct nt_udp_rxq_key {
	__u32 netns;
	__u16 port;
	__u16 _pad;
	__u32 seq; /* arrival number; 0 in the key of `udp_rxq_ends` */
};
struct nt_udp_rxq_val {
	__u64 addr;
	__u64 uid;
	__u32 len;       /* skb->len at netif_receive_skb */
	__u32 alloc_cpu; /* skb->alloc_cpu */
};
struct nt_udp_rxq_ends {
	__u32 head; /* next to be read */
	__u32 tail; /* next to arrive */
};

struct nt_skb_stage_body {
	__u64 skb_uid;
	__u64 since_prev_ns;
	__u64 since_first_ns;
	__u32 skb_gen;
	__u32 len;
	__s32 rc;       /* net_dev_xmit: driver return code; copy: bytes copied */
	__u16 protocol; /* ethertype, host order */
	__u8 stage;     /* enum nt_skb_stage */
	__u8 end;       /* 0 not terminal, 1 consumed, 3 last_seen (2, dropped, is a drop event) */
};

/* ---- the ring-buffer record --------------------------------------------- */

struct nt_event {
	struct nt_header hdr;
	union {
		struct nt_state_body state;
		struct nt_retransmit_body retransmit;
		struct nt_reset_body reset;
		struct nt_cong_body cong;
		struct nt_destroy_body destroy;
		struct nt_siftr_body siftr;
		struct nt_flow flow;
		struct nt_debug_body debug;
		struct nt_skb_drop_body skb_drop;
		struct nt_udp_fail_body udp_fail;
		struct nt_ip_body ip;
		struct nt_skb_stage_body skb_stage;
		struct nt_udp_body udp;
		struct nt_lifecycle_body lifecycle;
	};
};

#endif /* NETTRAIL_H */

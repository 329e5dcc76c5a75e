"""The C layout of kmod/nettrail.h as numpy dtypes: the only place Python learns it.

Every struct is a list of (name, numpy type) in declaration order, padding fields
included, so a packed numpy dtype has the same offsets as the C struct.
tests/test_bpf_layout.py compiles nettrail.h and compares every size and offset;
change both files together.
"""

from __future__ import annotations

import numpy as np

COMM_LEN = 16
ADDR_LEN = 16
CC_LEN = 16
EV_MAX = 32  # NT_EV_MAX: the per-type counter arrays

# enum nt_event_type
EV_STATE = 1
EV_RETRANSMIT = 2
EV_RESET = 3
EV_CONG = 4
EV_DESTROY = 5
EV_SIFTR = 6
EV_DEBUG = 7
EV_FLOW = 8
EV_SKB_DROP = 9
EV_UDP_FAIL = 10
EV_IP = 11
EV_SKB_STAGE = 12
EV_UDP = 13
EV_LIFECYCLE = 16  # tcp --tcp-fold (kmod/fold.bpf.h)
EVENT_NAMES: dict[int, str] = {
    EV_STATE: "tcp_state",
    EV_RETRANSMIT: "tcp_retransmit",
    EV_RESET: "tcp_reset",
    EV_CONG: "tcp_cong_state",
    EV_DESTROY: "tcp_destroy",
    EV_SIFTR: "siftr_sample",
    EV_DEBUG: "tcpdebug_snapshot",
    EV_FLOW: "flow_counters",
    EV_SKB_DROP: "skb_drop",
    EV_UDP_FAIL: "udp_fail",
    EV_IP: "ip_packet",
    EV_SKB_STAGE: "skb_stage",
    EV_UDP: "udp_datagram",
    EV_LIFECYCLE: "tcp_lifecycle",
}

# enum nt_ctx / nt_attribution
CTX_NAMES = {0: "unknown", 1: "task", 2: "softirq"}
ATTR_NONE, ATTR_CURRENT, ATTR_OWNER = 0, 1, 2

# provider bits (nt_config.providers)
PROV_TCP, PROV_SIFTR, PROV_TCPDEBUG, PROV_SKB, PROV_UDP, PROV_IP, PROV_SKB_LIFE = 0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40
PROV_IP_FLOWS = 0x80
PROV_UDP_CALLS = 0x100  # udp's always-on mode: call records only
PROV_SIFTR_POLL = 0x200  # siftr's always-on mode: each socket polled (kmod/siftr_poll.bpf.c)
EV_IP_FLOW = 14  # no event: the counters slot of ip-flows (generated = ip_flows entries created)
EV_IP_UNCOUNTED = 15  # no event: generated = packets ip-flows could not count (their entry was not made)

# nt_tcp_snapshot.flags
SNAP_SACK, SNAP_WSCALE, SNAP_TSTAMP, SNAP_NODELAY, SNAP_FASTOPEN, SNAP_ECN, SNAP_VALID = (
    0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x80,
)  # fmt: skip

Fields = list[tuple[str, "str | Fields"]]  # a nested list: a struct member (nt_ip_slot.key)

CONFIG: Fields = [
    ("cgroup_id", "<u8"),
    ("drop_reasons", "(2,)<u8"),
    ("tgid", "<u4"),
    ("netns", "<u4"),
    ("ppl", "<u4"),
    ("providers", "<u4"),
    ("exclude_tgid", "<u4"),
    ("drop_rate", "<u4"),
    ("ip_sample", "<u4"),
    ("skb_sample", "<u4"),
    ("preempt_from_rq", "<i4"),
    ("port", "<u2"),
    ("addr_family", "u1"),
    ("skb_windowed", "u1"),
    ("addr", f"V{ADDR_LEN}"),
    ("udp_calls_from", "u1"),
    ("_pad", "V3"),
    ("fold_window_ms", "<u4"),
]
SKB_SAMPLING: Fields = [("seen", "<u8"), ("sampled", "<u8"), ("pick", "<u4"), ("left", "<u4")]
SKB_FOLLOW_SLOTS = 1024  # NT_SKB_FOLLOW_SLOTS
SKB_FOLLOW: Fields = [("reads", "<u4"), ("_pad", "<u4"), ("n", f"({SKB_FOLLOW_SLOTS},)<u4")]
COUNTERS: Fields = [("generated", f"({EV_MAX},)<u8"), ("lost", f"({EV_MAX},)<u8")]
OWNER: Fields = [
    ("cgroup_id", "<u8"),
    ("first_ns", "<u8"),
    ("pid", "<u4"),
    ("tgid", "<u4"),
    ("uid", "<u4"),
    ("gid", "<u4"),
    ("comm", f"S{COMM_LEN}"),
]
LISTEN_KEY: Fields = [("netns", "<u4"), ("port", "<u2"), ("_pad", "<u2")]
HEADER: Fields = [
    ("ts_ns", "<u8"),
    ("cookie", "<u8"),
    ("cgroup_id", "<u8"),
    ("pid", "<u4"),
    ("tgid", "<u4"),
    ("uid", "<u4"),
    ("gid", "<u4"),
    ("netns", "<u4"),
    ("cpu", "<u4"),
    ("type", "<u2"),
    ("sport", "<u2"),
    ("dport", "<u2"),
    ("_pad", "<u2"),
    ("ctx", "u1"),
    ("attribution", "u1"),
    ("family", "u1"),
    ("_pad2", "u1"),
    ("comm", f"S{COMM_LEN}"),
    ("saddr", f"V{ADDR_LEN}"),
    ("daddr", f"V{ADDR_LEN}"),
    ("_pad3", "V4"),
]
STATE_BODY: Fields = [("sk_err", "<u4"), ("oldstate", "u1"), ("newstate", "u1"), ("flags", "u1"), ("_pad", "V1")]
RETRANSMIT_BODY: Fields = [
    ("seq", "<u4"),
    ("end_seq", "<u4"),
    ("err", "<i4"),
    ("segs", "<u2"),
    ("tcp_flags", "u1"),
    ("state", "u1"),
    ("ca_state", "u1"),
    ("synack", "u1"),
    ("timer", "u1"),
    ("_pad", "V1"),
]
RESET_BODY: Fields = [("reason", "<u4"), ("state", "u1"), ("sender", "u1"), ("active", "u1"), ("has_sock", "u1")]
CONG_BODY: Fields = [
    ("snd_cwnd", "<u4"),
    ("snd_ssthresh", "<u4"),
    ("mss", "<u4"),
    ("old_ca_state", "u1"),
    ("new_ca_state", "u1"),
    ("_pad", "V2"),
]
DESTROY_BODY: Fields = [
    ("bytes_acked", "<u8"),
    ("bytes_received", "<u8"),
    ("first_ns", "<u8"),
    ("segs_in", "<u4"),
    ("segs_out", "<u4"),
    ("total_retrans", "<u4"),
    ("state", "u1"),
    ("_pad", "V3"),
]
FOLD_STATES = 10  # NT_FOLD_STATES
FOLD_STATE, FOLD_TASK, FOLD_ERR, FOLD_FIN = 0x0F, 0x10, 0x20, 0x40  # NT_FOLD_*: the bits of nt_fold.states[]
FOLD: Fields = [
    ("born_ns", "<u8"),
    ("state_us", f"({FOLD_STATES},)<u4"),
    ("cong_us", "<u4"),
    ("cong_changes", "<u4"),
    ("snd_cwnd", "<u4"),
    ("snd_ssthresh", "<u4"),
    ("mss", "<u4"),
    ("states", f"({FOLD_STATES},)u1"),
    ("first_old", "u1"),
    ("nstates", "u1"),
    ("first_ca", "u1"),
    ("last_old_ca", "u1"),
    ("last_ca", "u1"),
    ("cong_ctx", "u1"),
    ("streaming", "u1"),
    ("cong_at", "u1"),
    ("resets", "u1"),
    ("reset_how", "u1"),  # NT_FOLD_RST_PEER | the Linux state at the last reset
    ("retrans", "<u2"),
    ("_pad_fold", "<u2"),
    ("retrans_first_us", "<u4"),
    ("retrans_last_us", "<u4"),
    ("reset_us", "<u4"),
]
FOLD_RST_PEER = 0x80  # NT_FOLD_RST_PEER
LIFECYCLE_BODY: Fields = [  # C: `struct nt_fold fold` first, flattened here as SIFTR_BODY's snapshot
    *FOLD,
    *(
        (name, "<u8")
        for name in ("bytes_acked", "bytes_received", "first_ns", "bytes_sent", "flow_samples", "flow_skbs")
    ),
    ("segs_in", "<u4"),
    ("segs_out", "<u4"),
    ("total_retrans", "<u4"),
    ("state", "u1"),
    ("partial", "u1"),
    ("has_flow", "u1"),
    ("_pad_tail", "u1"),
]
SNAPSHOT: Fields = [
    ("bytes_acked", "<u8"),
    ("bytes_received", "<u8"),
    *[
        (name, "<u4")
        for name in (
            "snd_cwnd",
            "snd_ssthresh",
            "snd_wnd",
            "rcv_wnd",
            "srtt_us",
            "mdev_us",
            "rto_us",
            "mss_cache",
            "snd_una",
            "snd_nxt",
            "rcv_nxt",
            "rcv_wup",
            "snd_wl1",
            "write_seq",
            "copied_seq",
            "sndbuf",
            "rcvbuf",
            "packets_out",
            "sacked_out",
            "lost_out",
            "retrans_out",
            "total_retrans",
            "delivered",
            "app_limited",
            "ts_recent",
            "rxhash",
        )  # fmt: skip
    ],
    ("state", "u1"),
    ("ca_state", "u1"),
    ("snd_wscale", "u1"),
    ("rcv_wscale", "u1"),
    ("flags", "u1"),
    ("retransmits", "u1"),
    ("backoff", "u1"),
    ("_pad", "u1"),
    ("cc_algo", f"S{CC_LEN}"),
]
SIFTR_BODY: Fields = [
    *SNAPSHOT,
    ("th_seq", "<u4"),
    ("th_ack", "<u4"),
    ("data_sz", "<u4"),
    ("direction", "u1"),
    ("_pad_tail", "V3"),
]
FLOW: Fields = [
    ("flow_cookie", "<u8"),
    ("packets_in", "<u4"),  # the socket's segs_in / segs_out (u32 in tcp_sock too)
    ("packets_out", "<u4"),
    *((name, "<u8") for name in ("bytes_in", "bytes_out", "samples", "first_ns", "last_ns", "skbs")),
]
DEBUG_BODY: Fields = [
    *SNAPSHOT,
    ("th_seq", "<u4"),
    ("th_ack", "<u4"),
    ("payload_len", "<u4"),
    ("drop_reason", "<u4"),
    ("th_win", "<u2"),
    ("th_flags", "u1"),
    ("has_seg", "u1"),
    ("direction", "u1"),
    ("prureq", "u1"),
    ("approx", "u1"),
    ("user_hook", "u1"),
]

DROP_KEY: Fields = [("location", "<u8"), ("reason", "<u4"), ("protocol", "<u2"), ("_pad", "<u2")]
DROP_BUDGET: Fields = [("window_ns", "<u8"), ("used", "<u8")]
SKB_DROP_BODY: Fields = [
    ("location", "<u8"),
    ("skb_uid", "<u8"),
    ("since_first_ns", "<u8"),
    ("reason", "<u4"),
    ("len", "<u4"),
    ("data_len", "<u4"),
    ("truesize", "<u4"),
    ("mark", "<u4"),
    ("if_index", "<u4"),
    ("skb_gen", "<u4"),
    ("protocol", "<u2"),
    ("data_off", "<u2"),
    ("l4_proto", "u1"),
    ("pkt_type", "u1"),
    ("cloned", "u1"),
    ("nr_frags", "u1"),
    ("if_name", f"S{COMM_LEN}"),
    ("_pad", "V4"),
]
SKB_STAGE_BODY: Fields = [
    ("skb_uid", "<u8"),
    ("since_prev_ns", "<u8"),
    ("since_first_ns", "<u8"),
    ("skb_gen", "<u4"),
    ("len", "<u4"),
    ("rc", "<i4"),
    ("protocol", "<u2"),
    ("stage", "u1"),
    ("end", "u1"),
]
SKB_STAGES = ("rx-first", "tx-first", "rx", "xmit-start", "xmit", "copy", "consume", "last-seen", "queue")

UDP_FAIL_BODY: Fields = [
    ("rc", "<i4"),
    ("rmem_alloc", "<u4"),
    ("truesize", "<u4"),
    ("rcvbuf", "<u4"),
    ("sk_protocol", "<u2"),
    ("_pad", "V2"),
]

IP6_EXT_LEN = 48  # NT_IP6_EXT_LEN
IP_BODY: Fields = [
    ("if_index", "<u4"),
    ("flow_label", "<u4"),
    ("skb_len", "<u4"),
    ("length", "<u2"),
    ("ident", "<u2"),
    ("frag_off", "<u2"),
    ("checksum", "<u2"),
    ("gso_segs", "<u2"),
    ("gso_size", "<u2"),
    ("dev_flags", "<u2"),
    ("direction", "u1"),
    ("version", "u1"),
    ("header_length", "u1"),
    ("protocol", "u1"),
    ("ttl", "u1"),
    ("tos", "u1"),
    ("_pad", "V4"),
    ("if_name", f"S{COMM_LEN}"),
    ("ext", f"V{IP6_EXT_LEN}"),
]

UDP_BODY: Fields = [
    ("ret", "<i4"),
    ("length", "<u2"),
    ("checksum", "<u2"),
    ("gso_segs", "<u2"),
    ("direction", "u1"),
    ("call", "u1"),
    ("protocol", "u1"),
    ("_pad", "V3"),
    ("if_name", f"S{COMM_LEN}"),
    ("ext", f"V{IP6_EXT_LEN}"),
]
UDP_FLOW_KEY: Fields = [
    ("netns", "<u4"),
    ("sport", "<u2"),
    ("dport", "<u2"),
    ("family", "u1"),
    ("protocol", "u1"),
    ("_pad", "V2"),
    ("saddr", f"V{ADDR_LEN}"),
    ("daddr", f"V{ADDR_LEN}"),
]
UDP_FLOW: Fields = [(name, "<u8") for name in ("packets_out", "bytes_out", "packets_in", "bytes_in")]
IP_FLOW_KEY: Fields = [
    ("netns", "<u4"),
    ("if_index", "<u4"),
    ("sport", "<u2"),
    ("dport", "<u2"),
    ("version", "u1"),
    ("protocol", "u1"),
    ("direction", "u1"),
    ("_pad", "u1"),
    ("saddr", f"V{ADDR_LEN}"),
    ("daddr", f"V{ADDR_LEN}"),
]
IP_FLOW: Fields = [(name, "<u8") for name in ("packets", "bytes", "samples", "first_ns", "last_ns", "first_jiffies")]
IP_SLOTS_PER_CPU = 1024  # NT_IP_SLOTS
IP_SLOT: Fields = [
    ("key", IP_FLOW_KEY),
    *[(name, "<u8") for name in ("packets", "bytes", "last_ns", "first_ns", "first_jiffies", "seq")],
    ("_pad", "V32"),
]

# C struct name -> fields, for the layout test (nested snapshot checked through its parents).
STRUCTS: dict[str, Fields] = {
    "nt_config": CONFIG,
    "nt_counters": COUNTERS,
    "nt_owner": OWNER,
    "nt_listen_key": LISTEN_KEY,
    "nt_header": HEADER,
    "nt_state_body": STATE_BODY,
    "nt_retransmit_body": RETRANSMIT_BODY,
    "nt_reset_body": RESET_BODY,
    "nt_cong_body": CONG_BODY,
    "nt_destroy_body": DESTROY_BODY,
    "nt_tcp_snapshot": SNAPSHOT,
    "nt_siftr_body": SIFTR_BODY,
    "nt_flow": FLOW,
    "nt_debug_body": DEBUG_BODY,
    "nt_drop_key": DROP_KEY,
    "nt_drop_budget": DROP_BUDGET,
    "nt_skb_drop_body": SKB_DROP_BODY,
    "nt_udp_fail_body": UDP_FAIL_BODY,
    "nt_ip_body": IP_BODY,
    "nt_skb_stage_body": SKB_STAGE_BODY,
    "nt_udp_body": UDP_BODY,
    "nt_udp_flow_key": UDP_FLOW_KEY,
    "nt_udp_flow": UDP_FLOW,
    "nt_ip_flow_key": IP_FLOW_KEY,
    "nt_ip_flow": IP_FLOW,
    "nt_ip_slot": IP_SLOT,
    "nt_skb_follow": SKB_FOLLOW,
    "nt_fold": FOLD,
    "nt_lifecycle_body": LIFECYCLE_BODY,
}
BODIES: dict[int, Fields] = {
    EV_STATE: STATE_BODY,
    EV_RETRANSMIT: RETRANSMIT_BODY,
    EV_RESET: RESET_BODY,
    EV_CONG: CONG_BODY,
    EV_DESTROY: DESTROY_BODY,
    EV_SIFTR: SIFTR_BODY,
    EV_FLOW: FLOW,
    EV_DEBUG: DEBUG_BODY,
    EV_SKB_DROP: SKB_DROP_BODY,
    EV_UDP_FAIL: UDP_FAIL_BODY,
    EV_IP: IP_BODY,
    EV_SKB_STAGE: SKB_STAGE_BODY,
    EV_UDP: UDP_BODY,
    EV_LIFECYCLE: LIFECYCLE_BODY,
}


def dtype_of(fields: Fields) -> np.dtype[np.void]:
    return np.dtype(fields)


HEADER_DTYPE = dtype_of(HEADER)
HEADER_SIZE = HEADER_DTYPE.itemsize
# struct nt_event: header + union of bodies, 8-byte aligned.
EVENT_SIZE = (HEADER_SIZE + max(dtype_of(b).itemsize for b in BODIES.values()) + 7) & ~7
EVENT_DTYPE = np.dtype({"names": [n for n, _ in HEADER], "formats": [t for _, t in HEADER], "itemsize": EVENT_SIZE})


def event_dtype(event_type: int) -> np.dtype[np.void]:
    """struct nt_event seen as one union member: header fields then body fields (padding left out)."""
    body = dtype_of(BODIES[event_type])
    head = [n for n in HEADER_DTYPE.names or () if not n.startswith("_")]
    tail = [n for n in body.names or () if not n.startswith("_")]
    names = head + tail
    formats = [HEADER_DTYPE.fields[n][0] for n in head] + [body.fields[n][0] for n in tail]  # type: ignore[index]
    offsets = [HEADER_DTYPE.fields[n][1] for n in head] + [HEADER_SIZE + body.fields[n][1] for n in tail]  # type: ignore[index]
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": EVENT_SIZE})


EVENT_DTYPES: dict[int, np.dtype[np.void]] = {t: event_dtype(t) for t in BODIES}
FIELD_NAMES: dict[int, tuple[str, ...]] = {t: tuple(d.names or ()) for t, d in EVENT_DTYPES.items()}


def decode_event(data: bytes) -> tuple[str, dict[str, object]]:
    """One struct nt_event -> (kind, fields by name): what the source does per row, for tests and tools.

    Wrong size or unknown type is an error naming both."""
    if len(data) != EVENT_SIZE:
        raise ValueError(f"struct nt_event is {EVENT_SIZE} bytes, got {len(data)}")
    event_type = int(np.frombuffer(data, HEADER_DTYPE, count=1)["type"][0])
    if event_type not in EVENT_DTYPES:
        raise ValueError(f"unknown nt_event type {event_type} (known: {sorted(EVENT_DTYPES)})")
    row = np.frombuffer(data, EVENT_DTYPES[event_type], count=1).tolist()[0]
    return EVENT_NAMES[event_type], dict(zip(FIELD_NAMES[event_type], row, strict=True))

"""Sample records for tests and benchmarks: one realistic record per kind, every field set.

Values come from NAME_VALUES (one value per field name: the same name means the same
data in every record kind); fields this table does not know yet are filled by type, so a
newly added optional field is still exercised (and shows up in the golden files).
Keep in sync with: translators/records.py (field names and choices).
"""

from __future__ import annotations

import typing
from typing import Any

import msgspec

from translators.records import RECORD_TYPES, AnalysisCounts, FieldDesc, Finding, Record, connection_uuid, describe

HOST, BOOT = "web-01", "7f3c2a9e-52b1-4c7e-9a0d-3e1f00c0ffee"

NAME_VALUES: dict[str, Any] = {
    # envelope
    "host_id": HOST,
    "boot_id": BOOT,
    "seq": 4242,
    "ts_ns": 81_234_567_890_123,
    "ts_wall": 1764403200.123456,
    "hook": "tp_btf/tcp_probe",
    "cpu": 1,
    "netns": 4026531840,
    "ctx": "task",
    "conn_uuid": connection_uuid(HOST, BOOT, 16417),
    "sock_cookie": 16417,
    "skb_uid": 987654321,
    "skb_gen": 3,
    "pid": 31337,
    "tgid": 31330,
    "comm": "curl",
    "uid": 1000,
    "gid": 1000,
    "cgroup_id": 4321,
    "attribution": "current",
    "approx": ["rttvar", "t_flags"],
    # flow
    "ip_ver": 4,
    "src": "10.0.0.5",
    "sport": 44312,
    "dst": "93.184.216.34",
    "dport": 443,
    # packets
    "if_name": "eth0",
    "if_index": 2,
    "if_local": False,
    "protocol": 6,
    "protocol_name": "TCP",
    "header_length": 20,
    "length": 1500,
    "payload_length": 1480,
    "ttl": 64,
    "tos": 0x02,
    "dscp": 0,
    "ecn": 2,
    "ident": 54321,
    "frag_flags": 2,
    "frag_offset": 0,
    "is_fragment": False,
    "flow_label": 0,
    "checksum": 0xB1E6,
    "gso_segs": 1,
    "gso_size": 1448,
    "frame": 17,
    "wire_length": 1514,
    "frame_bytes": bytes.fromhex("0242ac110002024201010101080045000034"),
    "link_type": 1,
    "bytes": 1472,
    "error": 0,
    "icmp_error": "port-unreachable",
    # tcp segments
    "tcp_seq": 3_141_592_653,
    "tcp_ack": 2_718_281_828,
    "rel_seq": 1449,
    "rel_ack": 1,
    "tcp_flags": 0x18,
    "tcp_flags_str": "PUSH|ACK",
    "tcp_offset": 32,
    "tcp_window": 502,
    "window_scaled": 64256,
    "tcp_checksum": 0x9A3C,
    "tcp_urgent": 0,
    "tcp_payload_len": 1448,
    "opt_mss": 1460,
    "opt_wscale": 7,
    "opt_sack_permitted": True,
    "opt_sack_blocks": [[3_141_594_101, 3_141_595_549]],
    "opt_ts_val": 1_234_567,
    "opt_ts_ecr": 7_654_321,
    "direction": "out",
    "stream": 3,
    "analysis": ["retransmission", "duplicate_ack"],
    "dup_ack_num": 2,
    "dup_ack_frame": 15,
    "ack_rtt_us": 2310,
    "bytes_in_flight": 2896,
    # tcp events
    "prev_state": "SYN_SENT",
    "state": "ESTABLISHED",
    "linux_prev_state": 2,
    "linux_state": 1,
    "inferred": False,
    "active": True,
    "caused_by": "peer",
    "tcp_seq_end": 3_141_594_101,
    "err": 0,
    "ca_state": "Recovery",
    "prev_ca_state": "Disorder",
    "retrans_kind": "fast",
    "sender": "peer",
    "reason": "NOT_SPECIFIED",
    "snd_cwnd": 14480,
    "snd_ssthresh": 28960,
    # connection
    "proto": "tcp",
    "source": "kernel",
    "start": 1764403190.5,
    "end": 1764403200.123456,
    "duration": 9.623456,
    "packets_orig": 120,
    "packets_resp": 118,
    "bytes_orig": 1024,
    "bytes_resp": 1_048_576,
    "wire_bytes_orig": 7264,
    "wire_bytes_resp": 1_056_500,
    "conn_state": "SF",
    "history": "ShADadFf",
    "direction_guessed": False,
    "handshake_rtt_us": 2100,
    "rtt_orig_min_us": 1900,
    "rtt_orig_mean_us": 2310,
    "rtt_orig_max_us": 4800,
    "rtt_resp_min_us": 35,
    "rtt_resp_mean_us": 60,
    "rtt_resp_max_us": 210,
    "retrans_bytes": 1448,
    "missed_bytes": 0,
    "completeness": 31,
    "bytes_acked": 1025,
    "bytes_received": 1_048_577,
    "segs_in": 118,
    "segs_out": 120,
    "total_retrans": 1,
    "lifetime_ns": 9_623_456_000,
    # siftr / tcp debug
    "snd_wnd": 64256,
    "rcv_wnd": 65535,
    "t_flags": 0x1E0,
    "t_flags2": 0x10,
    "mss": 1448,
    "srtt": 2310,
    "rttvar": 480,
    "rto": 204_000,
    "sack_enabled": True,
    "snd_scale": 7,
    "rcv_scale": 7,
    "snd_buf_hiwater": 16384,
    "snd_buf_cc": 2896,
    "rcv_buf_hiwater": 131072,
    "rcv_buf_cc": 0,
    "sent_inflight_bytes": 2896,
    "t_segqlen": 0,
    "flowid": 0x5A17C0DE,
    "flowtype": 2,
    "snd_una": 3_141_592_653,
    "snd_nxt": 3_141_595_549,
    "packets_out": 2,
    "sacked_out": 0,
    "lost_out": 0,
    "retrans_out": 0,
    "th_seq": 3_141_592_653,
    "th_ack": 2_718_281_828,
    "data_sz": 1448,
    "cc_algo": "cubic",
    "prureq": 9,
    "prureq_str": "SEND",
    "rcv_nxt": 2_718_281_828,
    "rcv_wup": 2_718_281_828,
    "snd_wl1": 2_718_281_827,
    "srtt_us": 2310,
    "rttvar_us": 480,
    "rto_ms": 204,
    "snd_ws": 7,
    "rcv_ws": 7,
    "ts_recent": 7_654_321,
    "retransmits": 0,
    "backoff": 0,
    "delivered": 119,
    "app_limited": 0,
    "drop_reason": 3,
    # skb
    "len": 1500,
    "linear_len": 128,
    "data_off": 66,
    "truesize": 2304,
    "nr_frags": 1,
    "pkt_type": 0,
    "cloned": False,
    "l4_proto": "udp",
    "mark": 0x1,
    "m_flags_compat": 0x2,
    "stage": "rx-deliver",
    "rc": 0,
    "since_prev_ns": 1840,
    "since_first_ns": 5120,
    "drop_reason_str": "NO_SOCKET",
    "drop_location": "__udp4_lib_rcv+0x8a1",
    "count": 12,
    "delta": 3,
    "rmem_alloc": 213_760,
    "rcvbuf": 212_992,
    "sk_err": 111,
    "packets_in": 1200,
    "bytes_in": 1_048_576,
    "bytes_out": 65536,
    "samples": 40,
    # self-health and alerts
    "event_type": "tcp_probe",
    "lost": 12,
    "lost_total": 340,
    "received_total": 1_000_000,
    "per_cpu": [140, 200],
    "rule_id": "K1",
    "severity": "warning",
    "status": "open",
    "message": "retransmission rate 4.2% over 10 s exceeds 2%",
    "metric": 0.042,
    "thresholds": {"rate": 0.02, "window_s": 10, "scope": "connection"},
    "evidence": [4201, 4207, 4213],
    "findings": [
        Finding(
            kind="zero_window",
            severity="warning",
            side="resp",
            count=7,
            seconds=4.55,
            ratio=0.7,
            frame=12,
            ts=1764403200.25,
            message="zero-window stall: the responder closed its receive window 7 times, "
            "stalling the originator for 4.55 s in all (70% of the connection's life)",
        ),
        Finding(
            kind="reset",
            severity="notice",
            side="orig",
            count=1,
            data_bytes=0,
            state="handshake",
            frame=3,
            ts=1764403200.5,
            message="reset by the originator during the handshake, before any data",
        ),
    ],
    "incomplete": False,
}
# Values that differ by record kind because the field's choices differ.
KIND_VALUES: dict[str, dict[str, Any]] = {
    "tcp_segment": {"direction": "orig"},
    "tcp_lifecycle": {  # a client's short connection, folded (tcp --tcp-fold)
        "partial": False,
        "state": "CLOSED",
        "state_path": "SYN_SENT ESTABLISHED FIN_WAIT_1 FIN_WAIT_2 CLOSED",
        "prev_state": "CLOSED",
        "linux_prev_state": 7,
        "linux_states": [2, 1, 4, 5, 7],
        "state_us": [0, 51, 140, 147, 173],
        "state_ctx": ["task", "softirq", "task", "softirq", "softirq"],
        "state_error": [False, False, False, False, False],
        "state_peer_closed": [False, False, False, False, True],  # the peer's FIN came: TIME_WAIT
        "born_ns": 81_234_567_716_000,
        "congestion_changes": 1,
        "first_ca_state": "Open",
        "prev_ca_state": "Open",
        "ca_state": "Open",
        "congestion_us": 52,
        "congestion_ctx": "softirq",
        "congestion_after": 2,
        "start": 1764403200.123282,
        "lifetime_ns": 174_123,
        "bytes_sent": 100,
        "flow_samples": 0,
        "flow_skbs": 9,
        "approx": ["snd_cwnd", "snd_ssthresh"],
    },
    "siftr_sample": {"conn_state": 4},
    "tcpdebug_snapshot": {"direction": "output", "drop_reason": "NOT_SPECIFIED"},
    "skb_drop": {"protocol": 0x0800},
    "skb_event": {"protocol": 0x0800, "end": "consumed", "stage": "consume"},
    "sock_event": {"proto": "udp", "rc": -105},
    "drop_count": {"protocol": 0x0800, "provider": "skb"},
    "loss_report": {"provider": "nettrail", "probe": "ringbuf"},
    "alert": {"provider": "nettrail", "probe": "alert", "proto": "tcp"},
    "sampling_report": {"probe": "sampling", "event_type": "siftr_sample", "setting": "ppl 8", "ratio": 8.0},
    "collector_status": {
        "probe": "status",
        "providers": ["tcp", "siftr"],
        "attached": {"inet_sock_set_state": 705, "tcp_probe": 706},
        "absent": ["tcp_cong_state_set"],
        "failed": {"tcp_retransmit_synack": "No such file or directory"},
        "missing_drop_reasons": ["TCP_LISTEN_OVERFLOW"],
        "rules_unavailable": {"K11": "needs the skb or udp provider (--providers)"},
        "rules_degraded": {
            "K4": "no TCP_LISTEN_OVERFLOW drop reason: listen overflows from the ListenOverflows counter"
        },
        "degraded": {"tcp": {"tcp_retransmit.err": "tracepoint tcp_retransmit_skb passes no err on this kernel"}},
        "kernel_release": "6.18.44",
    },
    "collector_stats": {
        "probe": "stats",
        "events_by_type": {"siftr_sample": 4000, "tcp_state": 12},
        "cpu_percent": 3.25,
        "poll_missed": {"4026532999": "net:[4026532999] (/proc/4242/ns/net): [Errno 1] Operation not permitted"},
        "counters_missed": {"4026533001": "gone in the interval: its moves since its last read are unread"},
    },
}
PROVIDER_OF = {
    "ip_packet": ("ip", "send"),
    "udp_datagram": ("udp", "receive"),
    "tcp_segment": ("tcp", "send"),
    "tcp_state": ("tcp", "state-change"),
    "tcp_retransmit": ("tcp", "retransmit"),
    "tcp_reset": ("tcp", "reset-received"),
    "tcp_cong_state": ("linux", "tcp-cong-state"),
    "tcp_lifecycle": ("tcp", "lifecycle"),
    "connection": ("tcp", "connection"),
    "siftr_sample": ("siftr", "siftr"),
    "tcpdebug_snapshot": ("tcpdebug", "debug-output"),
    "skb_event": ("skb", "m-consume"),
    "skb_drop": ("skb", "m-free"),
    "sock_event": ("linux", "rcvqueue-full"),
    "flow_counters": ("nettrail", "flow-counters"),
}


def kind_of(cls: type[Record]) -> str:
    return str(cls.__struct_config__.tag)


def _by_type(d: FieldDesc, cls: type[Record]) -> Any:
    """A value for a field NAME_VALUES does not list yet (a field added after this table)."""
    if d.choices:
        return d.choices[-1]
    tp = d.type
    if tp is int:
        return 7
    if tp is float:
        return 1.5
    if tp is bool:
        return True
    if tp is str:
        return f"{d.name}-sample"
    if tp is bytes:
        return b"\x00\x01\xfe"
    if tp is list:
        item = d.item_type
        return [1, 2] if item is int else [[1, 2]] if typing.get_origin(item) is list else ["a"]
    if tp is dict:
        return {"limit": 1}
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return tp()
    raise AssertionError(f"{kind_of(cls)}.{d.name}: no sample value for type {tp!r}")


def full_record(cls: type[Record], **overrides: Any) -> Record:
    """A realistic record of `cls` with every field, optional ones included, set."""
    kind = kind_of(cls)
    provider, probe = PROVIDER_OF.get(kind, ("nettrail", kind))
    values: dict[str, Any] = {"provider": provider, "probe": probe}
    for d in describe(cls):
        if d.name in ("provider", "probe", "schema"):
            continue
        value = KIND_VALUES.get(kind, {}).get(d.name, NAME_VALUES.get(d.name))
        if d.name == "analysis" and d.type is AnalysisCounts:
            value = AnalysisCounts(retransmission=1, duplicate_ack=2, window_update=5)
        if value is None or (d.choices and value not in d.choices):
            value = _by_type(d, cls)
        values[d.name] = value
    values.update(KIND_VALUES.get(kind, {}))
    values.update(overrides)
    return cls(**values)


def all_full_records() -> list[Record]:
    return [full_record(cls) for cls in RECORD_TYPES]


def minimal_record(cls: type[Record], **overrides: Any) -> Record:
    """The record with only its required fields set (choices respected)."""
    full = full_record(cls)
    values = {d.name: getattr(full, d.name) for d in describe(cls) if d.required}
    values.update(overrides)
    return cls(**values)

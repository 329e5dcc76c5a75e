"""tcpdebug provider: raw kernel events -> TcpDebugSnapshot (FreeBSD tcp:::debug-*).

One control-block snapshot per point: input (tcp_probe), output (net_dev_queue),
user (process-context calls mapped to PRU_* requests), drop (kfree_skb with a TCP_*
reason). The mapping and its gaps are documented in docs/collector.md. Keep in sync
with: kmod/nettrail.h (nt_debug_body, enum nt_debug_point) and kmod/tcp.bpf.c.
"""

from __future__ import annotations

from typing import Any

from translators.kernel import KernelEnv, KernelRecord, Raw, envelope, make, state_name
from translators.records import DEBUG_DIRECTIONS, PRU_REQUESTS, TcpDebugSnapshot
from translators.siftr import SNAP_VALID, snapshot_fields

TA_INPUT, TA_OUTPUT, TA_USER, TA_RESPOND, TA_DROP = range(5)
PRU_NONE = 0xFF
# The Linux hook behind each debug-user request nettrail emits.
USER_HOOKS = {
    "LISTEN": "tp_btf/inet_sock_set_state",
    "CONNECT": "tp_btf/inet_sock_set_state",
    "SHUTDOWN": "tp_btf/inet_sock_set_state",
    "DETACH": "tp_btf/tcp_destroy_sock",
    "SEND": "tp_btf/sock_send_length",
    "SENDOOB": "tp_btf/sock_send_length",
    "RCVD": "tp_btf/sock_recv_length",
    "RCVOOB": "tp_btf/sock_recv_length",
}
POINT_HOOKS = {TA_INPUT: "tp_btf/tcp_probe", TA_OUTPUT: "tp_btf/net_dev_queue", TA_DROP: "tp_btf/kfree_skb"}


def _control_block(raw: Raw) -> dict[str, Any]:
    fields = snapshot_fields(raw)
    fields.update(
        state=state_name(raw["state"]),
        rcv_nxt=raw["rcv_nxt"],
        rcv_wup=raw["rcv_wup"],
        snd_wl1=raw["snd_wl1"],
        srtt_us=raw["srtt_us"] >> 3,
        rttvar_us=raw["mdev_us"] >> 2,
        rto_ms=raw["rto_us"] // 1000 if raw["rto_us"] else None,
        snd_ws=raw["snd_wscale"],
        rcv_ws=raw["rcv_wscale"],
        ts_recent=raw["ts_recent"],
        retransmits=raw["retransmits"],
        backoff=raw["backoff"],
        total_retrans=raw["total_retrans"],
        delivered=raw["delivered"],
        app_limited=raw["app_limited"],
    )
    return fields


def translate_debug(raw: Raw, env: KernelEnv) -> list[KernelRecord]:
    point = raw["direction"]
    if not 0 <= point < len(DEBUG_DIRECTIONS):
        raise ValueError(f"tcpdebug_snapshot.direction: unknown TA_* point {point}")
    direction = DEBUG_DIRECTIONS[point]
    req = raw["prureq"]
    req_name = PRU_REQUESTS[req] if req != PRU_NONE and req < len(PRU_REQUESTS) else None
    hook = USER_HOOKS.get(req_name or "", "tp_btf/inet_sock_set_state") if point == TA_USER else POINT_HOOKS[point]
    kwargs = envelope(raw, env, "tcpdebug", f"debug-{direction}", hook)
    if raw["flags"] & SNAP_VALID:
        kwargs.update(_control_block(raw))
    if raw["has_seg"]:
        kwargs.update(
            tcp_seq=raw["th_seq"],
            tcp_ack=raw["th_ack"],
            tcp_flags=raw["th_flags"],
            tcp_window=raw["th_win"],
            tcp_payload_len=raw["payload_len"],
        )
    approx = ["snd_cwnd", "snd_ssthresh"] if raw["flags"] & SNAP_VALID else []
    if raw["approx"]:
        approx.append("prureq")
    rec = make(
        TcpDebugSnapshot,
        dict(
            **kwargs,
            approx=approx,
            direction=direction,
            prureq=req if req_name else None,
            prureq_str=req_name,
            drop_reason=env.drop_reasons.get(raw["drop_reason"], str(raw["drop_reason"])) if point == TA_DROP else None,
        ),
        env,
    )
    return [rec]

"""tcpdebug provider: raw kernel events -> TcpDebugSnapshot (FreeBSD tcp:::debug-*).

One control-block snapshot per point: input (tcp_probe), output (net_dev_queue),
user (process-context calls mapped to PRU_* requests), drop (kfree_skb with a TCP_*
reason). The mapping and its gaps are documented in docs/collector.md. Keep in sync
with: kmod/nettrail.h (nt_debug_body, enum nt_debug_point) and kmod/tcpdebug.bpf.h.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from translators import kernel
from translators.kernel import (
    KernelEnv,
    KernelRecord,
    Raw,
    ca_state_name,
    envelope,
    envelope_columns_grouped,
    make,
    row_by_row,
    rows_in_wire_order,
    state_name,
)
from translators.records import DEBUG_DIRECTIONS, PRU_REQUESTS, TcpDebugSnapshot
from translators.siftr import SNAP_VALID, snapshot_fields
from translators.tcp import FREEBSD_INITIAL_SSTHRESH, TCP_INFINITE_SSTHRESH

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
# Before Linux 6.3 (no sock_send_length) the calls are seen at the exits of tcp_sendmsg and
# tcp_recvmsg (nt_debug_body.user_hook NT_DEBUG_HOOK_FN, kmod/tcp_functions.bpf.c).
HOOK_FN = 1
FUNCTION_HOOKS = {
    "SEND": "fexit/tcp_sendmsg",
    "SENDOOB": "fexit/tcp_sendmsg",
    "RCVD": "fexit/tcp_recvmsg",
    "RCVOOB": "fexit/tcp_recvmsg",
}


def _user_hook(name: str | None, user_hook: int) -> str:
    """The hook of a debug-user record with request `name`."""
    if user_hook == HOOK_FN and name in FUNCTION_HOOKS:
        return FUNCTION_HOOKS[name]
    return USER_HOOKS.get(name or "", "tp_btf/inet_sock_set_state")


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
    hook = _user_hook(req_name, raw["user_hook"]) if point == TA_USER else POINT_HOOKS[point]
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
    elif point == TA_USER and req_name in FUNCTION_HOOKS:  # a send/receive call: the bytes it moved
        kwargs.update(tcp_payload_len=raw["payload_len"])
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


def translate_debug_batch(a: npt.NDArray[np.void], env: KernelEnv) -> list[KernelRecord]:
    """translate_debug over a whole batch, column by column: the same records byte for byte
    (tests/test_translators_wire_rows.py compares them on random events). A batch with an
    unknown TA_* point raises ValueError, so the caller translates it row by row."""
    if kernel.VALIDATE or not env.wire:
        return row_by_row(a, env, translate_debug)
    n = len(a)
    points = a["direction"].tolist()
    if n and max(points) >= len(DEBUG_DIRECTIONS):
        raise ValueError("tcpdebug_snapshot.direction: unknown TA_* point in the batch")

    def col(name: str) -> list[Any]:
        return a[name].tolist()  # type: ignore[no-any-return]

    reqs = col("prureq")
    req_names = [_REQ_NAMES[r] for r in reqs]
    hooks = [
        _user_hook(name, u) if p == TA_USER else POINT_HOOKS[p]
        for p, name, u in zip(points, req_names, col("user_hook"), strict=True)
    ]
    columns, groups = envelope_columns_grouped(a, env, "tcpdebug", [_PROBES[p] for p in points], hooks)
    valid = ((a["flags"] & SNAP_VALID) != 0).tolist()
    marked = a["approx"].tolist()
    columns.update(
        {
            "approx": [
                (["snd_cwnd", "snd_ssthresh"] if ok else []) + (["prureq"] if m else [])
                for ok, m in zip(valid, marked, strict=True)
            ],
            "direction": [DEBUG_DIRECTIONS[p] for p in points],
            "prureq": [r if name else None for r, name in zip(reqs, req_names, strict=True)],
            "prureq_str": req_names,
            "drop_reason": [
                env.drop_reasons.get(r, str(r)) if p == TA_DROP else None
                for p, r in zip(points, col("drop_reason"), strict=True)
            ],
        }
    )
    columns.update(_masked(_control_block_columns(a), valid))
    segment = {
        "tcp_seq": col("th_seq"),
        "tcp_ack": col("th_ack"),
        "tcp_flags": col("th_flags"),
        "tcp_window": col("th_win"),
        "tcp_payload_len": col("payload_len"),
    }
    has_seg = a["has_seg"].astype(bool).tolist()
    columns.update(_masked(segment, has_seg))
    calls = [
        not seg and p == TA_USER and name in FUNCTION_HOOKS
        for seg, p, name in zip(has_seg, points, req_names, strict=True)
    ]
    if any(calls):  # a send/receive call's record: the bytes it moved
        lens = columns["tcp_payload_len"]
        columns["tcp_payload_len"] = [
            n if call else v for v, n, call in zip(lens, col("payload_len"), calls, strict=True)
        ]
    return rows_in_wire_order(TcpDebugSnapshot, columns, n, groups)


def _control_block_columns(a: Any) -> dict[str, list[Any]]:
    """_control_block() of every row (valid or not: _masked keeps the valid ones)."""
    u64 = np.uint64
    mss = a["mss_cache"].astype(u64)
    ssthresh = a["snd_ssthresh"].astype(u64)
    rto = a["rto_us"].tolist()
    return {
        "snd_cwnd": (a["snd_cwnd"].astype(u64) * mss).tolist(),
        "snd_ssthresh": np.where(ssthresh >= TCP_INFINITE_SSTHRESH, FREEBSD_INITIAL_SSTHRESH, ssthresh * mss).tolist(),
        "snd_wnd": a["snd_wnd"].tolist(),
        "rcv_wnd": a["rcv_wnd"].tolist(),
        "mss": mss.tolist(),
        "snd_una": a["snd_una"].tolist(),
        "snd_nxt": a["snd_nxt"].tolist(),
        "packets_out": a["packets_out"].tolist(),
        "sacked_out": a["sacked_out"].tolist(),
        "lost_out": a["lost_out"].tolist(),
        "retrans_out": a["retrans_out"].tolist(),
        "ca_state": [_CA_NAMES[x] for x in a["ca_state"].tolist()],
        "state": [_STATE_NAMES[x] for x in a["state"].tolist()],
        "rcv_nxt": a["rcv_nxt"].tolist(),
        "rcv_wup": a["rcv_wup"].tolist(),
        "snd_wl1": a["snd_wl1"].tolist(),
        "srtt_us": (a["srtt_us"] >> 3).tolist(),
        "rttvar_us": (a["mdev_us"] >> 2).tolist(),
        "rto_ms": [r // 1000 if r else None for r in rto],
        "snd_ws": a["snd_wscale"].tolist(),
        "rcv_ws": a["rcv_wscale"].tolist(),
        "ts_recent": a["ts_recent"].tolist(),
        "retransmits": a["retransmits"].tolist(),
        "backoff": a["backoff"].tolist(),
        "total_retrans": a["total_retrans"].tolist(),
        "delivered": a["delivered"].tolist(),
        "app_limited": a["app_limited"].tolist(),
    }


def _masked(columns: dict[str, list[Any]], keep: list[bool]) -> dict[str, list[Any]]:
    """None (the Struct's default) where keep is false, as the row form leaves those fields out."""
    if all(keep):
        return columns
    return {name: [v if ok else None for v, ok in zip(values, keep, strict=True)] for name, values in columns.items()}


_REQ_NAMES = tuple(PRU_REQUESTS[r] if r != PRU_NONE and r < len(PRU_REQUESTS) else None for r in range(256))
_PROBES = tuple(f"debug-{d}" for d in DEBUG_DIRECTIONS)
_CA_NAMES = tuple(ca_state_name(x) for x in range(256))
_STATE_NAMES = tuple(state_name(x) for x in range(256))

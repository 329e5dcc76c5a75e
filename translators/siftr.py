"""siftr provider: raw kernel events -> SiftrSample and FlowCounters.

A sample snapshots the control block of the flow a packet belongs to (providers.md
6.2): windows in bytes, srtt/rto in µs, FreeBSD t_flags synthesized from Linux bits
(6.3). FlowCounters are the exact per-flow counts the kernel keeps whatever `ppl`.
Keep in sync with: kmod/nettrail.h (nt_tcp_snapshot, nt_siftr_body, nt_flow) and
docs/collector.md.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import numpy.typing as npt

from translators import kernel
from translators.kernel import (
    FREEBSD_STATE_NUMBER,
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
from translators.records import FlowCounters, SiftrSample
from translators.tcp import FREEBSD_INITIAL_SSTHRESH, TCP_INFINITE_SSTHRESH, cwnd_bytes, ssthresh_bytes

# nt_tcp_snapshot.flags
SNAP_SACK, SNAP_WSCALE, SNAP_TSTAMP, SNAP_NODELAY, SNAP_FASTOPEN, SNAP_ECN, SNAP_VALID = (
    0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x80,
)  # fmt: skip
# FreeBSD tcp_var.h bits (providers.md 6.3)
TF_NODELAY, TF_REQ_SCALE, TF_RCVD_SCALE, TF_REQ_TSTMP, TF_RCVD_TSTMP, TF_SACK_PERMIT = (
    0x4, 0x20, 0x40, 0x80, 0x100, 0x200,
)  # fmt: skip
TF_FASTRECOVERY, TF_CONGRECOVERY, TF_FASTOPEN = 0x100000, 0x20000000, 0x80000000
TF2_ECN_PERMIT = 0x20
CA_CWR, CA_RECOVERY = 2, 3
U32 = 0xFFFFFFFF
SAMPLE_APPROX = ("snd_cwnd", "snd_ssthresh", "t_flags", "t_flags2", "snd_buf_hiwater", "rcv_buf_hiwater", "flowid")


def t_flags(flags: int, ca_state: int) -> int:
    """FreeBSD t_flags from the Linux bits that have a clear equivalent; everything else 0."""
    out = TF_NODELAY if flags & SNAP_NODELAY else 0
    if flags & SNAP_WSCALE:
        out |= TF_REQ_SCALE | TF_RCVD_SCALE
    if flags & SNAP_TSTAMP:
        out |= TF_REQ_TSTMP | TF_RCVD_TSTMP
    if flags & SNAP_SACK:
        out |= TF_SACK_PERMIT
    if ca_state == CA_RECOVERY:
        out |= TF_FASTRECOVERY
    if ca_state == CA_CWR:
        out |= TF_CONGRECOVERY
    if flags & SNAP_FASTOPEN:
        out |= TF_FASTOPEN
    return out


def snapshot_fields(raw: Raw) -> dict[str, Any]:
    """The control-block values SIFTR and tcpdebug share, in stable units."""
    mss = raw["mss_cache"]
    return {
        "snd_cwnd": cwnd_bytes(raw["snd_cwnd"], mss),
        "snd_ssthresh": ssthresh_bytes(raw["snd_ssthresh"], mss),
        "snd_wnd": raw["snd_wnd"],
        "rcv_wnd": raw["rcv_wnd"],
        "mss": mss,
        "snd_una": raw["snd_una"],
        "snd_nxt": raw["snd_nxt"],
        "packets_out": raw["packets_out"],
        "sacked_out": raw["sacked_out"],
        "lost_out": raw["lost_out"],
        "retrans_out": raw["retrans_out"],
        "ca_state": ca_state_name(raw["ca_state"]),
    }


# nt_siftr_body.direction: a packet received, sent, or no packet (siftr-poll's poll)
DIRECTION_POLL = 2
POLL_HOOK = "iter/tcp"


def translate_sample(raw: Raw, env: KernelEnv) -> list[KernelRecord]:
    d = raw["direction"]
    hook, direction = _HOOKS[d], _DIRECTIONS[d]
    polled = d == DIRECTION_POLL
    flags = raw["flags"]
    wscale = bool(flags & SNAP_WSCALE)
    state = state_name(raw["state"])
    rec = make(
        SiftrSample,
        dict(
            **envelope(raw, env, "siftr", "siftr", hook),
            **snapshot_fields(raw),
            direction=direction,
            t_flags=t_flags(flags, raw["ca_state"]),
            t_flags2=TF2_ECN_PERMIT if flags & SNAP_ECN else 0,
            conn_state=FREEBSD_STATE_NUMBER.get(state) if state else None,
            srtt=raw["srtt_us"] >> 3,
            rttvar=raw["mdev_us"] >> 2,
            rto=raw["rto_us"] or None,
            sack_enabled=bool(flags & SNAP_SACK),
            snd_scale=raw["snd_wscale"] if wscale else 0,
            rcv_scale=raw["rcv_wscale"] if wscale else 0,
            snd_buf_hiwater=raw["sndbuf"],
            snd_buf_cc=(raw["write_seq"] - raw["snd_una"]) & U32,
            rcv_buf_hiwater=raw["rcvbuf"],
            rcv_buf_cc=(raw["rcv_nxt"] - raw["copied_seq"]) & U32,
            sent_inflight_bytes=(raw["snd_nxt"] - raw["snd_una"]) & U32,
            flowid=raw["rxhash"] or (raw["cookie"] & U32),
            flowtype=0,
            th_seq=None if polled else raw["th_seq"],
            th_ack=None if polled else raw["th_ack"],
            data_sz=None if polled else raw["data_sz"],
            cc_algo=kernel.kernel_text(raw["cc_algo"]) or None,
            approx=list(SAMPLE_APPROX),
        ),
        env,
    )
    return [rec]


def translate_flow(raw: Raw, env: KernelEnv) -> list[KernelRecord]:
    """Exact counters: final at tcp_destroy_sock, or read from the flows map while running."""
    return [
        make(
            FlowCounters,
            dict(
                **envelope(
                    raw,
                    env,
                    "siftr",
                    "flow-counters",
                    "map/flows" if raw.get("periodic") else "tp_btf/tcp_destroy_sock",
                ),
                proto="tcp",
                packets_in=raw["packets_in"],
                packets_out=raw["packets_out"],
                bytes_in=raw["bytes_in"],
                bytes_out=raw["bytes_out"],
                samples=raw["samples"],
                skbs=raw["skbs"],
            ),
            env,
        )
    ]


def translate_sample_batch(a: npt.NDArray[np.void], env: KernelEnv) -> list[KernelRecord]:
    """translate_sample over a whole batch of siftr rows, column by column.

    Same records, byte for byte (tests/test_translators_kernel.py compares them), but
    the arithmetic runs in numpy and each record is one dict built in the wire order:
    the collector's high-rate path. Structs (env.wire off) or VALIDATE go row by row."""
    if kernel.VALIDATE or not env.wire:
        return row_by_row(a, env, translate_sample)
    n = len(a)

    def col(name: str) -> list[Any]:
        return a[name].tolist()  # type: ignore[no-any-return]

    u64 = np.uint64
    mss = a["mss_cache"].astype(u64)
    ssthresh = a["snd_ssthresh"].astype(u64)
    flags = a["flags"]
    ca = a["ca_state"]
    wscale = (flags & SNAP_WSCALE) != 0
    tflags = np.where(flags & SNAP_NODELAY, TF_NODELAY, 0)
    tflags |= np.where(wscale, TF_REQ_SCALE | TF_RCVD_SCALE, 0)
    tflags |= np.where(flags & SNAP_TSTAMP, TF_REQ_TSTMP | TF_RCVD_TSTMP, 0)
    tflags |= np.where(flags & SNAP_SACK, TF_SACK_PERMIT, 0)
    tflags |= np.where(ca == CA_RECOVERY, TF_FASTRECOVERY, 0)
    tflags |= np.where(ca == CA_CWR, TF_CONGRECOVERY, 0)
    tflags |= np.where(flags & SNAP_FASTOPEN, TF_FASTOPEN, 0)
    rxhash = a["rxhash"].astype(u64)
    directions = col("direction")
    columns, groups = envelope_columns_grouped(a, env, "siftr", "siftr", list(map(_HOOKS.__getitem__, directions)))
    columns.update(
        {
            "approx": list(map(list, itertools.repeat(SAMPLE_APPROX, n))),
            "direction": list(map(_DIRECTIONS.__getitem__, directions)),
            "snd_cwnd": (a["snd_cwnd"].astype(u64) * mss).tolist(),
            "snd_ssthresh": np.where(
                ssthresh >= TCP_INFINITE_SSTHRESH, FREEBSD_INITIAL_SSTHRESH, ssthresh * mss
            ).tolist(),
            "snd_wnd": col("snd_wnd"),
            "rcv_wnd": col("rcv_wnd"),
            "t_flags": tflags.tolist(),
            "t_flags2": np.where(flags & SNAP_ECN, TF2_ECN_PERMIT, 0).tolist(),
            "conn_state": list(map(_STATE_NUMBERS.__getitem__, col("state"))),
            "mss": mss.tolist(),
            "srtt": (a["srtt_us"] >> 3).tolist(),
            "rttvar": (a["mdev_us"] >> 2).tolist(),
            "rto": [r or None for r in col("rto_us")],
            "sack_enabled": ((flags & SNAP_SACK) != 0).tolist(),
            "snd_scale": np.where(wscale, a["snd_wscale"], 0).tolist(),
            "rcv_scale": np.where(wscale, a["rcv_wscale"], 0).tolist(),
            "snd_buf_hiwater": col("sndbuf"),
            "snd_buf_cc": ((a["write_seq"].astype(u64) - a["snd_una"]) & U32).tolist(),
            "rcv_buf_hiwater": col("rcvbuf"),
            "rcv_buf_cc": ((a["rcv_nxt"].astype(u64) - a["copied_seq"]) & U32).tolist(),
            "sent_inflight_bytes": ((a["snd_nxt"].astype(u64) - a["snd_una"]) & U32).tolist(),
            "flowid": np.where(rxhash != 0, rxhash, a["cookie"] & U32).tolist(),
            "flowtype": 0,
            "snd_una": col("snd_una"),
            "snd_nxt": col("snd_nxt"),
            "packets_out": col("packets_out"),
            "sacked_out": col("sacked_out"),
            "lost_out": col("lost_out"),
            "retrans_out": col("retrans_out"),
            "th_seq": _packet_only(col("th_seq"), directions),
            "th_ack": _packet_only(col("th_ack"), directions),
            "data_sz": _packet_only(col("data_sz"), directions),
            "ca_state": list(map(_CA_NAMES.__getitem__, ca.tolist())),
            "cc_algo": _decoded(col("cc_algo")),
        }
    )
    return rows_in_wire_order(SiftrSample, columns, n, groups)


# Per-value lookups for the u8 columns of the batch form (same values as the row form).
_HOOKS = ("tp_btf/tcp_probe", "tp_btf/net_dev_queue", POLL_HOOK) + ("tp_btf/tcp_probe",) * 253
_DIRECTIONS = ("in", "out", "poll") + ("in",) * 253
_CA_NAMES = tuple(ca_state_name(x) for x in range(256))
_STATE_NUMBERS = tuple(FREEBSD_STATE_NUMBER.get(state_name(s) or "") for s in range(256))


def _packet_only(values: list[int | None], directions: list[int]) -> list[int | None]:
    """A packet's field, None for a poll's sample (it has no packet)."""
    if DIRECTION_POLL not in directions:
        return values
    return [None if d == DIRECTION_POLL else v for v, d in zip(values, directions, strict=True)]


def _decoded(names: list[bytes]) -> list[str | None]:
    """Each name decoded as the row form does, once per distinct value."""
    text = {raw: kernel.kernel_text(raw) or None for raw in set(names)}
    return list(map(text.__getitem__, names))

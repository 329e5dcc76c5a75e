"""KernelSource keeps arrival order when a chunk mixes column-wise and row-by-row kinds.

Keep in sync with collector/bpf/source.py (_translate, _in_arrival_order, CHUNK).
"""

from __future__ import annotations

import socket
from typing import Any

import numpy as np
import pytest
from test_translators_wire_rows import few_connections

from collector.bpf import layout, source
from collector.bpf.source import KernelSource
from translators import kernel
from translators.kernel import KernelEnv
from translators.records import to_json

V4 = {"family": 2, "sport": 40000, "dport": 80}


def state_event(ts_ns: int, cookie: int, old: int, new: int) -> np.ndarray:
    """One inet_sock_set_state event as a raw ring row; FIN_WAIT_2 -> CLOSE after the peer's
    FIN (NT_STATE_FIN_RCVD) gives two records."""
    raw = np.zeros(1, dtype=layout.EVENT_DTYPES[layout.EV_STATE])
    raw["type"], raw["ts_ns"], raw["cookie"], raw["ctx"] = layout.EV_STATE, ts_ns, cookie, 1
    for name, value in V4.items():
        raw[name] = value
    raw["saddr"] = np.void(socket.inet_aton("10.0.0.1").ljust(16, b"\0"))
    raw["daddr"] = np.void(socket.inet_aton("10.0.0.2").ljust(16, b"\0"))
    raw["oldstate"], raw["newstate"] = old, new
    raw["flags"] = 1 if new == 7 else 0
    return raw.view(f"V{layout.EVENT_DTYPE.itemsize}")


def mixed_events(n: int) -> np.ndarray:
    siftr = few_connections(n)
    siftr["sport"] = np.where(siftr["sport"] == 0, 41000, siftr["sport"])
    rows = list(siftr.view(f"V{layout.EVENT_DTYPE.itemsize}"))
    for at in (0, 7, 4095, 4096, n // 2, n - 1):  # chunk edges included
        rows.insert(at, state_event(at, 9000 + at, 5, 7)[0])  # FIN_WAIT_2 -> CLOSE: two records
        rows.insert(at, state_event(at, 9000 + at, 1, 4)[0])
    return np.array(rows, dtype=f"V{layout.EVENT_DTYPE.itemsize}")


def translated(raw: np.ndarray, validate: bool, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    monkeypatch.setattr(kernel, "VALIDATE", validate)  # on: every kind goes row by row
    env = KernelEnv(host_id="h", boot_id="b", wall_offset=1_795_000_000.5, wire=True)
    src = KernelSource(None, env, flow_interval=3600)  # type: ignore[arg-type]  # translate needs no session
    src.seq = 1
    return src.number(src.translate(raw))


def test_a_mixed_chunk_gives_the_row_by_row_records_in_arrival_order(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = mixed_events(9000)
    assert len(raw) > 2 * source.CHUNK
    fast = translated(raw, False, monkeypatch)
    slow = translated(raw, True, monkeypatch)
    assert len(fast) == 9000 + 6 * 3
    assert [to_json(r) for r in fast] == [to_json(r) for r in slow]
    kinds = [r["kind"] for r in fast[:6]]
    assert kinds[:3] == ["tcp_state"] * 3 and kinds[3] == "siftr_sample"


def test_a_malformed_event_in_a_column_wise_kind_is_counted_and_the_rest_translated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    event_type = next(t for t, n in layout.EVENT_NAMES.items() if n == "tcpdebug_snapshot")
    rows = np.zeros(5, dtype=layout.EVENT_DTYPES[event_type])
    rows["type"], rows["ts_ns"], rows["cookie"] = event_type, np.arange(1, 6), 77
    rows["direction"] = [0, 1, 9, 2, 4]  # 9: no such TA_* point
    rows["prureq"] = 0xFF
    raw = rows.view(f"V{layout.EVENT_DTYPE.itemsize}")
    monkeypatch.setattr(kernel, "VALIDATE", False)
    env = KernelEnv(host_id="h", boot_id="b", wall_offset=0.0, wire=True)
    src = KernelSource(None, env, flow_interval=3600)  # type: ignore[arg-type]
    records = src.translate(raw)
    assert [r["direction"] for r in records] == ["input", "output", "user", "drop"]
    assert src.totals.malformed == {"tcpdebug_snapshot": 1}
    # ... and reported as lost, once (docs/collector.md, "Where records can be lost").
    reports = src.malformed_reports()
    assert [(r.kind, r.probe, r.hook, r.event_type, r.lost, r.lost_total) for r in reports] == [
        ("loss_report", "malformed", "decode", "tcpdebug_snapshot", 1, 1)
    ]
    assert src.malformed_reports() == []

"""analysis/flows/live_summary.py on tcp --tcp-fold's records: a socket's tcp_lifecycle gets
the conn_state, history and direction_guessed its streamed `connection` summary gets, and
expand() hands them to the Connection it stands for, also when the socket's reset or
samples streamed before its folded changes (their time decides, as on the wire).
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from record_samples import full_record

from analysis.flows.live_summary import LiveSummaries
from translators import records as r
from translators.kernel import KernelRecord
from translators.tcp_lifecycle import expand

SERVER = {  # the passive end of record_samples' exchange
    "state_path": "SYN_RECEIVED ESTABLISHED CLOSE_WAIT LAST_ACK CLOSED", "prev_state": "LISTEN",
    "linux_prev_state": 10, "linux_states": [3, 1, 8, 9, 7],
    "state_ctx": ["softirq", "softirq", "softirq", "task", "softirq"],
}  # fmt: skip
ABORTED = {  # a client that reset its connection (SO_LINGER 0): ESTABLISHED -> CLOSE with the RST
    "state_path": "SYN_SENT ESTABLISHED CLOSED", "linux_states": [2, 1, 7], "state_us": [0, 51, 140],
    "state_ctx": ["task", "softirq", "task"], "state_error": [False, False, False], "congestion_after": 2,
}  # fmt: skip
ZEEK = ("conn_state", "history", "direction_guessed")


def lifecycle(**kw: Any) -> r.TcpLifecycle:
    rec = full_record(r.TcpLifecycle, **{name: None for name in ZEEK}, **kw)
    assert isinstance(rec, r.TcpLifecycle)
    return rec


def streamed(rec: r.TcpLifecycle, *extra: r.Record) -> dict[str, Any]:
    """The summary's Zeek fields when the socket streams: its records (and `extra`) in time order."""
    parts: list[KernelRecord] = [*sorted([*expand(rec), *extra], key=lambda p: p.ts_ns)]
    summary = [p for p in LiveSummaries().fold(parts) if isinstance(p, r.Connection)][-1]
    return {name: getattr(summary, name) for name in ZEEK}


def folded(rec: r.TcpLifecycle, *early: r.Record) -> dict[str, Any]:
    """Folded: `early` streamed before the lifecycle came; the lifecycle and its expansion."""
    [done] = [p for p in LiveSummaries().fold([*early, rec]) if isinstance(p, r.TcpLifecycle)]
    [summary] = [p for p in expand(done) if isinstance(p, r.Connection)]
    got = {name: getattr(done, name) for name in ZEEK}
    assert got == {name: getattr(summary, name) for name in ZEEK}  # expand() carries them
    return got


@pytest.mark.parametrize("kw", [{}, SERVER], ids=["client", "server"])
def test_a_lifecycle_gets_the_zeek_summary_of_its_streamed_records(kw: dict[str, Any]) -> None:
    rec = lifecycle(**kw)
    want = streamed(rec)
    assert want["conn_state"] == "SF" and want["history"]
    assert folded(rec) == want


def test_a_reset_that_streamed_before_the_folded_changes_goes_in_its_place() -> None:
    rec = lifecycle(**ABORTED)
    born = rec.born_ns or 0
    reset = r.TcpReset(
        host_id=rec.host_id, boot_id=rec.boot_id, seq=1, ts_ns=born + 139_600, ts_wall=rec.ts_wall,
        sock_cookie=rec.sock_cookie, provider="tcp", probe="reset-sent", sender="local", state="ESTABLISHED",
    )  # fmt: skip
    want = streamed(rec, reset)
    assert "R" in (want["history"] or "")
    assert folded(rec, reset) == want
    # read as it came (the reset before the handshake), it would not be
    out_of_order = LiveSummaries().fold([reset, *expand(rec)])
    late = [p for p in out_of_order if isinstance(p, r.Connection)][-1]
    assert late.history != want["history"]


def test_a_partial_lifecycle_then_streamed_changes_summarise_as_streamed() -> None:
    rec = lifecycle(**SERVER)
    parts = expand(rec)
    changes = [p for p in parts if p.kind == "tcp_state"]
    head = msgspec.structs.replace(
        rec, partial=True, linux_states=rec.linux_states[:2], state_us=rec.state_us[:2], state_ctx=rec.state_ctx[:2],
        state_error=rec.state_error[:2], ts_ns=changes[2].ts_ns - 1,
    )  # fmt: skip
    tail = [p for p in parts if p.ts_ns > head.ts_ns]
    out = LiveSummaries().fold([head, *tail])
    assert head.history is None  # no summary until the end
    summary = [p for p in out if isinstance(p, r.Connection)][-1]
    assert {name: getattr(summary, name) for name in ZEEK} == streamed(rec)

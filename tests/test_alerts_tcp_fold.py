"""tcp --tcp-fold and the rules (analysis/alerts/folded.py): an engine fed a socket's
tcp_lifecycle gives the same alerts as one fed the records the socket streams without the
fold (expand(): tests/test_collect_tcp_fold.py proves them equal to the kernel's). A
CLOSE_WAIT leak flushed by the fold window still raises one K10 finding for the process.
"""

from __future__ import annotations

from typing import Any

import msgspec
from record_samples import full_record

from analysis.alerts.engine import RuleEngine
from analysis.alerts.folded import HOLD_S, Unfold, parts
from tests.alert_streams import engine
from translators import records as r

T0_NS, T0 = 81_234_567_000_000, 1_764_403_200.0
LEAKED, SHORT = 60, 20
SERVER = {  # a server's socket whose client closed, its own side never: flushed by the window
    "partial": True, "state": "CLOSE_WAIT", "state_path": "SYN_RECEIVED ESTABLISHED CLOSE_WAIT",
    "prev_state": "LISTEN", "linux_prev_state": 10, "linux_states": [3, 1, 8], "state_us": [0, 40, 90],
    "state_ctx": ["softirq", "softirq", "softirq"], "state_error": [False] * 3, "congestion_changes": 0,
    "sport": 8080, "dst": "10.0.0.7", "src": "10.0.0.1", "pid": 4242, "tgid": 4242, "comm": "leaky",
}  # fmt: skip


def lifecycle(i: int, at: float, **kw: Any) -> r.TcpLifecycle:
    """Socket i, its first change `at` seconds in, the record 1.2 s later (past the window)."""
    born = T0_NS + int(at * 1e9)
    values = {"sock_cookie": 1000 + i, "conn_uuid": f"conn-{i}", "seq": i, "born_ns": born, "dport": 30000 + i,
              "ts_ns": born + 1_200_000_000, "ts_wall": T0 + at + 1.2, "start": T0 + at, **kw}  # fmt: skip
    rec = full_record(r.TcpLifecycle, **values)
    assert isinstance(rec, r.TcpLifecycle)
    return rec


def stream() -> list[r.TcpLifecycle]:
    """Short client connections (TIME_WAIT inferred at their end) and a CLOSE_WAIT leak."""
    short = [lifecycle(i, 0.01 * i, sport=40000 + i) for i in range(SHORT)]
    leaked = [lifecycle(SHORT + i, 0.5 + 0.01 * i, **SERVER) for i in range(LEAKED)]
    return sorted(short + leaked, key=lambda rec: rec.ts_ns)


def alerts_of(eng: RuleEngine, records: list[Any]) -> list[dict[str, Any]]:
    out: list[r.Alert] = []
    for rec in records:
        out += eng.feed(rec)
    for t in range(0, 200, 5):  # the same sweeps for both
        out += eng.tick(T0 + t)
    out += eng.finish()
    return [msgspec.to_builtins(a) for a in out]


def without_ids(alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """alert_id is random (a uuid4 per finding): compared as which alerts share one."""
    ids: dict[str, int] = {}
    return [{**a, "alert_id": ids.setdefault(a["alert_id"], len(ids))} for a in alerts]


def test_a_lifecycle_raises_the_alerts_of_the_records_it_stands_for() -> None:
    folded = stream()
    streamed = [p for rec in folded for p in parts(rec)]
    assert {p.kind for p in streamed} == {"tcp_state", "tcp_cong_state", "flow_counters", "connection"}
    config = {"K10": {"close_wait_s": 30, "sweep_s": 5}}
    got, want = alerts_of(engine(**config), folded), alerts_of(engine(**config), streamed)
    assert without_ids(got) == without_ids(want)
    k10 = [a for a in got if a["rule_id"] == "K10" and a["condition"] == "close-wait"]
    assert {a["alert_id"] for a in k10} == {k10[0]["alert_id"]}  # one finding for the process
    assert (k10[0]["tgid"], k10[0]["comm"], k10[0]["members"]) == (4242, "leaky", LEAKED)
    assert k10[-1]["severity"] == "warning"  # over close_wait_per_process (50)
    # evidence names the records that were received: the lifecycles' seqs
    assert set(k10[0]["evidence"]) <= {rec.seq for rec in folded}


def test_the_engine_counts_the_parts_it_was_fed() -> None:
    eng = engine()
    rec = stream()[0]
    eng.feed(rec)
    assert eng.records == len(parts(rec))


def test_a_reset_before_any_change_of_its_socket_waits_for_the_lifecycle_or_the_hold() -> None:
    eng = engine()
    eng.unfold = Unfold()
    rec = stream()[0]
    reset = r.TcpReset(
        host_id=rec.host_id, boot_id=rec.boot_id, seq=99, ts_ns=rec.ts_ns - 1000, ts_wall=rec.ts_wall - 1e-6,
        sock_cookie=7, provider="tcp", probe="reset-received", sender="peer",
    )  # fmt: skip
    eng.feed(reset)  # no change of socket 7 yet: held
    assert eng.records == 0
    eng.tick(reset.ts_wall + HOLD_S / 2)
    assert eng.records == 0
    eng.tick(reset.ts_wall + HOLD_S)  # its changes never came (a socket from before tracing): fed
    assert eng.records == 1
    # a reset before its socket's lifecycle waits for it and comes in time order; after it, at once
    early = msgspec.structs.replace(reset, sock_cookie=rec.sock_cookie, seq=100)
    eng.feed(early)
    assert eng.records == 1
    eng.feed(rec)
    assert eng.records == 2 + len(parts(rec))
    eng.feed(msgspec.structs.replace(early, seq=101))
    assert eng.records == 3 + len(parts(rec))

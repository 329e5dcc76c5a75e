"""The alert rules over real folded and streamed records of the same traffic: two sessions
at once (tests/test_collect_tcp_fold.py's), each session's records through a rule engine of
its own (analysis/alerts/engine.py, which reads a tcp_lifecycle as the records it stands
for): the same alerts, rule by rule, for a reset storm (aborted connections: K3) and
connects refused by RST (K14, and no K8 connect timeout: the refused sockets' resets stream
before their folded changes, and the engine puts them back in time order).
"""

from __future__ import annotations

import socket
from typing import Any

from analysis.alerts.engine import RuleEngine
from analysis.alerts.folded import Unfold
from tests.alert_streams import engine
from tests.kernel_support import bound_listener, kernel
from tests.test_collect_tcp_fold import exchange, two_sessions
from translators.kernel import as_struct
from translators.records import Alert

pytestmark = kernel
ABORTED, REFUSED = 15, 25
SAME = ("rule_id", "condition", "severity", "status", "members", "count", "tgid", "comm", "dst", "dport", "src")


def alerts_of(records: list[Any], folding: bool = False) -> list[tuple[Any, ...]]:
    eng: RuleEngine = engine()
    if folding:  # as nettrail collect --tcp-fold makes it (analysis/alerts/live.py)
        eng.unfold = Unfold()
    out: list[Alert] = []
    for rec in records:
        out += eng.feed(as_struct(rec))
    last = max(as_struct(r).ts_wall for r in records)
    for dt in range(0, 400, 5):
        out += eng.tick(last + dt)
    out += eng.finish()
    return sorted((tuple(getattr(a, k) for k in SAME) for a in out if a.rule_id.startswith("K")), key=repr)


def test_folded_and_streamed_records_raise_the_same_alerts() -> None:
    listener = bound_listener()
    port = listener.getsockname()[1]
    with two_sessions(port, poll_interval=60.0) as (streamed, folded):
        listener.listen(ABORTED + 1)
        aborted = [exchange(listener, port, linger0=True) for _ in range(ABORTED)]
        listener.close()
        refused = 0
        for _ in range(REFUSED):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
            except ConnectionRefusedError:
                refused += 1
        assert refused == REFUSED
        sockets = {c for pair in aborted for c in pair}
        for cap in (streamed, folded):
            cap.wait_for(lambda rs: sockets <= {r.sock_cookie for r in rs if r.kind in ("connection", "tcp_lifecycle")})
            cap.settle()
    want, got = alerts_of(streamed.records), alerts_of(folded.records, folding=True)
    assert got == want

"""A CLOSE_WAIT leak under tcp --tcp-fold is still one K10 finding with the same numbers
(tests/test_alerts_close_wait_kernel.py's leak, folded): the leaked sockets' changes stay
in their folds until the window passes, the collector's own run of the iterator flushes
them (no siftr-poll), and the rules read each flushed lifecycle's state path
(analysis/alerts/folded.py). Short connections the same process made and closed are one
tcp_lifecycle per end. About 20 s.
"""

from __future__ import annotations

import os
import socket
import time
from collections import Counter
from pathlib import Path

from tests.alert_kernel_support import KERNEL_ALERTS, stop
from tests.collect_process import Collector
from tests.netns_lab import netns_lab
from tests.test_alerts_close_wait_kernel import FIRST, MORE, RULES, close_wait_in, leak
from translators.records import Alert, from_json

pytestmark = KERNEL_ALERTS
SHORT = 10


def test_a_folded_close_wait_leak_is_one_k10_finding_and_short_connections_one_record_per_end(
    tmp_path: Path,
) -> None:
    rules, out = tmp_path / "rules.toml", tmp_path / "out.jsonl"
    rules.write_text(RULES)
    held: list[socket.socket] = []
    with netns_lab() as ns:
        col = Collector(
            "--providers", "tcp", "--tcp-fold", "--filter", f"netns={ns.inode}", "--alerts", "--rules", str(rules),
            "--out", str(out), "--no-stack-counters",
        )  # fmt: skip
        lst = ns.socket()
        try:
            col.wait_attached(timeout=120)
            lst.bind(("127.0.0.1", 0))
            lst.listen(256)
            for _ in range(SHORT):  # closed on both sides: one lifecycle per end
                cli = ns.socket()
                cli.connect(lst.getsockname())
                srv, _ = lst.accept()
                cli.close()
                srv.recv(1)
                srv.close()
            leak(ns, lst, FIRST, held)
            time.sleep(4.0)
            leak(ns, lst, MORE, held)
            time.sleep(8.0)
            in_close_wait = close_wait_in(ns)
            port = lst.getsockname()[1]
        finally:
            code, _, err = stop(col, timeout=60)
            for s in held:
                s.close()
            lst.close()
    assert code == 0, err
    assert in_close_wait == FIRST + MORE
    records = list(map(from_json, out.read_bytes().splitlines()))
    k10 = [a for a in records if isinstance(a, Alert) and a.rule_id == "K10"]
    assert {a.alert_id for a in k10} == {k10[0].alert_id}
    first, latest = k10[0], k10[-1]
    assert (first.condition, first.severity, first.members) == ("close-wait", "notice", FIRST)
    assert (latest.severity, latest.members, latest.status) == ("warning", in_close_wait, "open")
    assert (latest.tgid, latest.src, latest.sport) == (os.getpid(), "127.0.0.1", port)
    # the leaked server sockets were flushed (partial) and stream since: no state record of theirs before
    kinds = Counter(r.kind for r in records)
    assert kinds["tcp_state"] == 0, kinds  # a leaked socket's next change would be its close: not yet
    lifecycles = [r for r in records if r.kind == "tcp_lifecycle"]
    partial = [r for r in lifecycles if r.partial]  # type: ignore[attr-defined]
    assert len(partial) >= FIRST + MORE
    leaked = [r for r in partial if r.sport == port and r.state != "LISTEN"]  # type: ignore[attr-defined]
    assert len(leaked) == FIRST + MORE and {r.state for r in leaked} == {"CLOSE_WAIT"}  # type: ignore[attr-defined]
    # ends: both of each short connection, the client of each leaked one
    assert len([r for r in lifecycles if not r.partial]) == 2 * SHORT + FIRST + MORE  # type: ignore[attr-defined]

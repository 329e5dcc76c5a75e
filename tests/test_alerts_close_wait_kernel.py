"""Issue 34 on real sockets: a CLOSE_WAIT leak is one K10 finding, and its text is current.

A process (this test, inside a network namespace of its own) accepts connections whose
clients then close, and never closes its side: 30 sockets first, 90 more once the first
version is out. One `nettrail collect --providers tcp --alerts` filtered to the namespace
in the kernel runs around it; its own output is read back. Exactly one K10 finding: its
first version said 30 (notice), its latest says 120 (warning: over 50), the same number
`ss -tan state close-wait` lists in the namespace, with the process named by its tgid.
About 20 s.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from tests.alert_kernel_support import KERNEL_ALERTS, stop
from tests.collect_process import Collector
from tests.netns_lab import Netns, netns_lab
from translators.records import Alert, from_json

pytestmark = KERNEL_ALERTS
FIRST, MORE = 30, 90
RULES = "[K10]\nclose_wait_s = 2\nsweep_s = 1\n[engine]\nupdate_interval_s = 5\n"


def leak(ns: Netns, lst: socket.socket, n: int, held: list[socket.socket]) -> None:
    """n connections accepted and kept; their clients close, so each server side sits in CLOSE_WAIT."""
    for _ in range(n):
        cli = ns.socket()
        cli.connect(lst.getsockname())
        srv, _ = lst.accept()
        held.append(srv)
        cli.close()


def close_wait_in(ns: Netns) -> int:
    return len(ns.run("ss", "-Htan", "state", "close-wait").splitlines())


def test_a_close_wait_leak_is_one_k10_finding_whose_latest_text_and_members_match_ss(tmp_path: Path) -> None:
    rules, out = tmp_path / "rules.toml", tmp_path / "out.jsonl"
    rules.write_text(RULES)
    held: list[socket.socket] = []
    with netns_lab() as ns:
        col = Collector(
            "--providers", "tcp", "--filter", f"netns={ns.inode}", "--alerts", "--rules", str(rules),
            "--out", str(out), "--no-stack-counters",
        )  # fmt: skip
        lst = ns.socket()
        try:
            col.wait_attached(timeout=120)
            # listening after the collector attached: its accepted children inherit this
            # process as their owner (docs/collector.md, the listeners map)
            lst.bind(("127.0.0.1", 0))
            lst.listen(256)
            leak(ns, lst, FIRST, held)
            time.sleep(4.0)  # past close_wait_s and a sweep: the first version, 30 sockets
            leak(ns, lst, MORE, held)
            time.sleep(8.0)  # past update_interval_s after the first version, plus sweeps
            in_close_wait = close_wait_in(ns)
            port = lst.getsockname()[1]
        finally:
            code, _, err = stop(col, timeout=60)
            for s in held:
                s.close()
            lst.close()
    assert code == 0, err
    assert in_close_wait == FIRST + MORE
    alerts = [r for r in map(from_json, out.read_bytes().splitlines()) if isinstance(r, Alert)]
    k10 = [a for a in alerts if a.rule_id == "K10"]
    assert {a.alert_id for a in k10} == {k10[0].alert_id}  # exactly one finding, all its versions
    first, latest = k10[0], k10[-1]
    assert (first.condition, first.severity, first.members, first.metric) == ("close-wait", "notice", FIRST, FIRST)
    assert (latest.condition, latest.severity, latest.status) == ("close-wait", "warning", "open")
    assert latest.members == in_close_wait and latest.metric == float(in_close_wait)
    assert len(latest.member_conn_uuids) == 50 and len(set(latest.member_conn_uuids)) == 50
    comm = Path("/proc/self/comm").read_text().strip()
    assert (latest.tgid, latest.comm, latest.src, latest.sport) == (os.getpid(), comm, "127.0.0.1", port)
    assert latest.message.startswith(
        f"{comm} (pid {os.getpid()}) on 127.0.0.1:{port} holds {in_close_wait} sockets in CLOSE_WAIT"
    )
    # at most one version per update_interval_s besides the escalation and the final one
    assert len(k10) <= 4, [(a.ts_wall, a.members, a.severity) for a in k10]

"""Kernel test: the Overview's "TIME_WAIT by destination" counts what `ss -tan state
time-wait` lists at the same moment (issue 34 item 6). Clients close first toward one
listener in a network namespace: those whose server closes too go to TIME_WAIT; those whose
server leaks the socket (CLOSE_WAIT) leave a timewait mini-socket waiting in FIN_WAIT_2,
which ss lists as FIN-WAIT-2 and the table must not count (it did: their rows read
FIN_WAIT_2 -> TIME_WAIT -> CLOSED)."""

from __future__ import annotations

import socket
import time

import pytest

from tests.kernel_support import kernel, tracing
from tests.netns_lab import netns_lab
from translators.records import TcpStateChange
from webapp.dashboard import time_wait
from webapp.traces.store import store_batch

pytestmark = [*kernel, pytest.mark.django_db]

CLOSED_BOTH, LEAKED = 5, 4


def ss_count(ns: object, state: str, port: int) -> int:
    out = ns.run("ss", "-Htan", "state", state)  # type: ignore[attr-defined]
    return sum(1 for line in out.splitlines() if line.split()[-1].endswith(f":{port}"))


def test_the_time_wait_table_counts_what_ss_lists_in_time_wait_not_fin_wait_2() -> None:
    with netns_lab() as ns:
        lst = ns.socket()
        lst.bind(("127.0.0.1", 0))
        lst.listen(64)
        port = lst.getsockname()[1]
        leaked: list[socket.socket] = []
        with tracing(("tcp",), netns=ns.inode) as cap:
            for i in range(CLOSED_BOTH + LEAKED):
                client = ns.socket()
                client.connect(("127.0.0.1", port))
                server, _ = lst.accept()
                client.close()  # the client closes first
                if i < CLOSED_BOTH:
                    server.settimeout(5)
                    assert server.recv(1) == b""  # its FIN came
                    server.close()  # -> the client's TIME_WAIT
                else:
                    leaked.append(server)  # never closed: the client waits in FIN_WAIT_2
            deadline = time.monotonic() + 10
            while ss_count(ns, "time-wait", port) < CLOSED_BOTH and time.monotonic() < deadline:
                time.sleep(0.05)
            records = cap.settle()
            in_ss = ss_count(ns, "time-wait", port), ss_count(ns, "fin-wait-2", port)
        store_batch([r for r in records if isinstance(r, TcpStateChange)])
        rows = time_wait.by_destination(["test-host"])
        for s in (*leaked, lst):
            s.close()
    assert in_ss == (CLOSED_BOTH, LEAKED)
    assert [(r["dst"], r["dport"], r["sockets"]) for r in rows] == [("127.0.0.1", port, in_ss[0])]

"""A LISTEN row shows its accept queue as `ss -ltn` does (issue 34 item 6): the collector
reads every listener's queue and backlog through sock_diag and records them when they move
(collector/listen_queues.py, `listen-queue`); the Connections page and the connection's
page show the newest (webapp/dashboard/listen_rows.py). Kernel half: the numbers equal
ss's Recv-Q and Send-Q in a namespace; webapp half: the rows carry them."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from collector import netns
from collector.listen_queues import QUEUE_PROBE, ListenQueues
from tests.kernel_support import kernel
from tests.netns_lab import netns_lab
from translators.kernel import KernelEnv
from translators.records import Record, SockEvent, TcpStateChange, connection_uuid
from webapp.traces.store import store_batch

HOST, BOOT = "listen-host", "boot-1"
_seq = itertools.count(1)


def ss_listen(ns: Any, port: int) -> tuple[int, int]:
    """(Recv-Q, Send-Q) of the listener on `port`, as ss -ltn prints them."""
    for line in ns.run("ss", "-Hltn").splitlines():
        state, recv_q, send_q, local = line.split()[:4]
        if local.endswith(f":{port}"):
            return int(recv_q), int(send_q)
    raise AssertionError(f"no listener on {port}")


@kernel[0]
@kernel[1]
def test_the_collector_reads_each_listeners_queue_as_ss_does_and_again_only_when_it_moves() -> None:
    env = KernelEnv(host_id="h", boot_id="b", wall_offset=time.time() - time.monotonic())
    with netns_lab() as lab:
        lst = lab.socket()
        lst.bind(("127.0.0.1", 0))
        lst.listen(3)
        port = lst.getsockname()[1]
        ns = netns.Netns(lab.inode, lab.name)
        reader = ListenQueues()
        first = [r for r in reader.changed(env, 1, ns) if r.sport == port]
        clients = [lab.socket() for _ in range(2)]
        for c in clients:
            c.connect(("127.0.0.1", port))  # completed, never accepted: in the accept queue
        time.sleep(0.2)
        moved = [r for r in reader.changed(env, 2, ns) if r.sport == port]
        still = [r for r in reader.changed(env, 3, ns) if r.sport == port]
        in_ss = ss_listen(lab, port)
        for s in (*clients, lst):
            s.close()
    assert [(r.probe, r.queue, r.backlog) for r in first] == [(QUEUE_PROBE, 0, 3)]
    assert [(r.queue, r.backlog) for r in moved] == [in_ss] == [(2, 3)]
    assert still == []  # nothing moved: no record


def listener(cookie: int, port: int) -> list[Record]:
    uuid = connection_uuid(HOST, BOOT, cookie)
    base = {"host_id": HOST, "boot_id": BOOT, "conn_uuid": uuid, "src": "0.0.0.0", "sport": port, "ip_ver": 4}
    t = time.time() - 10
    out: list[Record] = [
        TcpStateChange(**base, seq=next(_seq), ts_ns=1, ts_wall=t, provider="tcp", probe="state-change",
                       prev_state="CLOSED", state="LISTEN", ctx="task", comm="nginx", pid=80),
    ]  # fmt: skip
    for i, (probe, queue) in enumerate((("listen-queue", 0), ("listen-overflow", 129), ("listen-queue", 7))):
        out.append(
            SockEvent(**base, seq=next(_seq), ts_ns=10 + i, ts_wall=t + 1 + i, provider="linux", probe=probe,
                      hook="sock_diag/inet_diag", proto="tcp", queue=queue, backlog=128, ctx="task")
        )  # fmt: skip
    return out


@pytest.mark.django_db
def test_a_listen_row_carries_its_newest_queue_and_backlog() -> None:
    store_batch(listener(1, 443) + listener(2, 8080)[:1])  # :8080 was never read
    c = Client()
    c.force_login(get_user_model().objects.create_user("viewer", password="pw-for-tests-only"))
    rows = c.get("/api/dash/connections", {"q": f"host {HOST}"}).json()["rows"]
    got = {r["sport"]: r["listen_queue"] and (r["listen_queue"]["queue"], r["listen_queue"]["backlog"], r["listen_queue"]["full"]) for r in rows}  # fmt: skip
    assert got == {443: (7, 128, False), 8080: None}
    detail = c.get(f"/api/dash/connections/{connection_uuid(HOST, BOOT, 1)}", {"host": HOST}).json()
    assert (detail["conn"]["state"], detail["conn"]["listen_queue"]["queue"]) == ("LISTEN", 7)


def test_the_filters_keep_the_listeners_they_name() -> None:
    from collector.listen_queues import Listener, filter_for

    web, any_addr = Listener(2, "10.0.0.1", 443, 0, 128, 1, 11), Listener(10, "::", 8080, 0, 4096, 2, 12)
    assert [filter_for(443)(x) for x in (web, any_addr)] == [True, False]
    assert [filter_for(0, "10.0.0.1")(x) for x in (web, any_addr)] == [True, True]  # a wildcard takes it
    assert [filter_for(0, "10.0.0.9")(x) for x in (web, any_addr)] == [False, True]
    assert [filter_for(443, owner_filtered=True)(x) for x in (web, any_addr)] == [False, False]
    assert [filter_for()(x) for x in (web, any_addr)] == [True, True]

"""A LISTEN row shows its accept queue as `ss -ltn` does (issue 34 item 6), in the browser:
on the Connections list ("LISTEN · queue 7 of 128") and on the listener's own page."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from translators.records import Record, SockEvent, TcpStateChange, connection_uuid

from .conftest import HOST, Server

pytestmark = pytest.mark.browser

BOOT, COOKIE, PORT = "boot-listen", 9_134, 45_134
_seq = itertools.count(8_000_000)


def listener(t0: float) -> list[Record]:
    base = {"host_id": HOST, "boot_id": BOOT, "conn_uuid": connection_uuid(HOST, BOOT, COOKIE), "ip_ver": 4,
            "src": "0.0.0.0", "sport": PORT}  # fmt: skip

    def env(dt: float) -> dict[str, Any]:
        seq = next(_seq)
        return {**base, "seq": seq, "ts_ns": seq, "ts_wall": t0 + dt}

    return [
        TcpStateChange(**env(0), provider="tcp", probe="state-change", prev_state="CLOSED", state="LISTEN",
                       ctx="task", comm="nginx", pid=80),
        SockEvent(**env(1), provider="linux", probe="listen-queue", hook="sock_diag/inet_diag", proto="tcp",
                  queue=0, backlog=128, ctx="task"),
        SockEvent(**env(2), provider="linux", probe="listen-queue", hook="sock_diag/inet_diag", proto="tcp",
                  queue=7, backlog=128, ctx="task"),
    ]  # fmt: skip


def test_a_listen_row_shows_its_queue_and_backlog(server: Server, page: Any) -> None:
    server.ingest(listener(time.time() - 5))
    page.goto(f"{server.url}/connections/?q=sport+{PORT}")
    page.wait_for_function("document.querySelectorAll('#conns tbody tr').length === 1")
    cell = page.locator('#conns tbody tr [data-col="state"]')
    assert cell.inner_text() == "LISTEN · queue 7 of 128"
    assert cell.locator(".listen-queue").get_attribute("title").startswith("ss -ltn: Recv-Q 7, Send-Q 128")
    page.goto(f"{server.url}/connections/{connection_uuid(HOST, BOOT, COOKIE)}/")
    page.wait_for_selector("body[data-loaded='1']", timeout=10000)
    assert "LISTEN, accept queue 7 of backlog 128 at" in page.locator("main").inner_text()

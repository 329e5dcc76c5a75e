"""Alerts about nettrail's own traffic stay out of the alert views (issue 18 item 2).

The records carry the identity the tables use (own_traffic.py): a collector_status of this
machine's boot with the collector's pid, an alert K7 about the browser's socket toward
the webapp's own listening address (the test server's port: webapp.serve exports it), one
about the collector's ingest (its pid), and one K1 about another connection. The
Alerts page and the Overview show the K1 only; the toggle shows all three.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from translators.records import Alert, CollectorStatus, connection_uuid

from .conftest import HOST, Server, screenshot
from .dashboard_batch import BOOT, _seq

COLLECTOR_PID = 38_888


def _alert(rule: str, cookie: int, comm: str, pid: int, sport: int, dport: int, message: str) -> Alert:
    t = time.time() - 1.0
    return Alert(
        host_id=HOST, boot_id=BOOT, seq=next(_seq), ts_ns=int(t * 1e9), ts_wall=t, provider="nettrail", probe="alert",
        conn_uuid=connection_uuid(HOST, BOOT, cookie), comm=comm, pid=pid, tgid=pid,
        src="127.0.0.1", sport=sport, dst="127.0.0.1", dport=dport, rule_id=rule, alert_id=f"own-test-{rule}-{cookie}",
        severity="warning", status="open", proto="tcp", start=t, count=1, message=message,
    )  # fmt: skip


def test_alerts_about_nettrails_own_sockets_are_left_out_and_others_still_shown(server: Server, page: Any) -> None:
    port = urlsplit(server.url).port
    assert port is not None
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    status = CollectorStatus(
        host_id=HOST, boot_id=boot, seq=next(_seq), ts_ns=1, ts_wall=time.time() - 86_400,  # an old run: not the newest
        provider="nettrail", probe="status", providers=["tcp"], attached={}, pid=COLLECTOR_PID, comm="nettrail",
    )  # fmt: skip
    browser = _alert(
        "K7", 7001, "Chrome_ChildIOT", 61_234, 51_000, port, f"smoothed RTT of Chrome_ChildIOT toward 127.0.0.1:{port}"
    )
    ingest = _alert("K7", 7002, "nettrail", COLLECTOR_PID, 51_001, 9_999, "smoothed RTT of nettrail toward its server")
    other = _alert("K1", 7003, "iperf3", 61_235, 51_002, 5_201, "40 of 1000 segments retransmitted (4.0%) by iperf3")
    assert server.ingest([status, browser, ingest, other])["stored"] == 4

    page.goto(f"{server.url}/alerts/?rule=K7")
    page.wait_for_function("document.body.dataset.loaded === '1'")
    assert page.locator("#alerts tbody tr").count() == 0
    assert page.locator("#own").is_checked() is False
    page.check("#own")
    page.wait_for_function("document.querySelectorAll('#alerts tbody tr').length === 2")
    messages = sorted(page.locator("#alerts tbody td.msg .clamp").all_inner_texts())
    assert messages == sorted([browser.message, ingest.message])
    assert "own=1" in page.url

    page.goto(f"{server.url}/alerts/?rule=K1")
    page.wait_for_function("document.body.dataset.loaded === '1'")
    assert other.message in page.locator("#alerts tbody").inner_text()
    screenshot(page, "alerts-own-traffic-hidden")

    shown = page.request.get(f"{server.url}/api/dash/alerts").json()["alerts"]
    ids = {a["message"] for a in shown}
    assert other.message in ids and browser.message not in ids and ingest.message not in ids
    overview = page.request.get(f"{server.url}/api/dash/overview").json()["alerts"]
    on_overview = {a["message"] for a in overview}
    assert other.message in on_overview and browser.message not in on_overview and ingest.message not in on_overview

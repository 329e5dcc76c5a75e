"""An open alert's row shows its current numbers, replaced live as new versions arrive
over the websocket, with its first and worst values (issue 18 item 6)."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import pytest

from translators.records import Alert, CollectorStats, CollectorStatus

from .conftest import HOST, Server, screenshot
from .dashboard_batch import BOOT, _seq

pytestmark = pytest.mark.browser

TARGET = "toward 10.99.9.9:5201"


def version(metric: float, count: int, status: str, start: float) -> Alert:
    now = time.time()
    return Alert(
        host_id=HOST, boot_id=BOOT, seq=next(_seq), ts_ns=time.monotonic_ns(), ts_wall=now, provider="nettrail",
        probe="alert", rule_id="K1", severity="warning", start=start, alert_id="k1-live-versions", metric=metric,
        count=count, status=status, message=f"{count} segments retransmitted ({metric:.1%}) {TARGET}",
    )  # fmt: skip


def test_an_open_alert_shows_its_current_first_and_worst_numbers_live(server: Server, page: Any) -> None:
    start = time.time()
    server.ingest([version(0.020, 39, "open", start)])
    page.goto(f"{server.url}/alerts/?rule=K1")
    page.wait_for_selector("body[data-loaded='1']")
    row = page.locator("#alerts tbody tr", has_text=TARGET)
    row.wait_for()
    assert row.locator("td.count").inner_text() == "39"
    assert row.locator(".versions").count() == 0  # one version: nothing to compare yet
    page.wait_for_function("document.body.dataset.liveGroups !== undefined")

    server.ingest([version(0.061, 120, "open", start)])  # no reload: the live feed brings it
    page.wait_for_function(
        f"[...document.querySelectorAll('#alerts tbody tr')].some(r => r.textContent.includes('{TARGET}')"
        " && r.querySelector('td.count').textContent === '120')"
    )
    assert row.locator("td.msg .clamp").inner_text() == f"120 segments retransmitted (6.1%) {TARGET}"
    assert row.locator(".versions .first").inner_text().startswith("first metric 0.02 (fired 39 times) at ")
    assert row.locator(".versions .worst").inner_text().startswith("worst metric 0.061 (fired 120 times) at ")

    server.ingest([version(0.047, 249, "closed", start)])
    page.wait_for_function(
        f"[...document.querySelectorAll('#alerts tbody tr')].some(r => r.textContent.includes('{TARGET}')"
        " && r.querySelector('td.count').textContent === '249')"
    )
    assert row.count() == 1  # one row per alert, whatever the number of versions
    cells = row.locator("td").all_inner_texts()
    assert cells[4] == "closed"
    assert row.locator(".versions .worst").inner_text().startswith("worst metric 0.061 (fired 120 times) at ")
    assert row.locator(".versions").get_attribute("data-versions") == "3"
    assert row.locator(".versions .first").get_attribute("title") == f"39 segments retransmitted (2.0%) {TARGET}"
    screenshot(page, "alert-versions")


def test_an_alert_left_open_by_a_restarted_collector_says_nothing_follows_it(server: Server, page: Any) -> None:
    host = "restarted-host"
    other = Server(server.url, server.make_token(host), server.data_dir)
    t = time.time()
    left = msgspec.structs.replace(version(0.05, 12, "open", t), host_id=host, alert_id="k1-left", ts_wall=t)
    fresh = CollectorStatus(
        host_id=host,
        boot_id=BOOT,
        seq=next(_seq),
        ts_ns=1,
        ts_wall=t + 1,
        provider="nettrail",
        probe="status",
        providers=["tcp"],
        attached={},
    )  # fmt: skip  (untraced_ns null: a fresh start, whose engine does not know the alert)
    assert other.ingest([left, fresh])["stored"] == 2
    page.goto(f"{server.url}/alerts/?host={host}")
    page.wait_for_selector("body[data-loaded='1']")
    status = page.locator("#alerts tbody tr td.status").inner_text()
    assert status.startswith("open, not followed since the collector restarted ")


def test_an_alert_left_open_by_a_stopped_collector_says_nothing_follows_it(server: Server, page: Any) -> None:
    host = "stopped-host"
    other = Server(server.url, server.make_token(host), server.data_dir)
    t = time.time()
    left = msgspec.structs.replace(version(0.05, 12, "open", t), host_id=host, alert_id="k1-stopped", ts_wall=t)
    last = CollectorStats(
        host_id=host, boot_id=BOOT, seq=next(_seq), ts_ns=2, ts_wall=t + 1, provider="nettrail", probe="stats",
        interval_s=3.0, cpu_time_s=0.01, cpu_total_s=0.5, cpu_percent=0.3, events=4, events_per_s=1.3, records=4,
        stopped=True,  # the collector's last record: SIGTERM, Ctrl-C or --duration
    )  # fmt: skip
    assert other.ingest([left, last])["stored"] == 2
    page.goto(f"{server.url}/alerts/?host={host}")
    page.wait_for_selector("body[data-loaded='1']")
    status = page.locator("#alerts tbody tr td.status").inner_text()
    assert status.startswith("open, not followed since the collector stopped ")

"""A grouped finding (issue 34 item 1): one row for 200 sockets, its member sockets linked
to their connection pages on the Alerts page, its count on the Overview, where open
findings come by severity before the newer notices."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from translators.records import Alert

from .conftest import HOST, Server, screenshot
from .dashboard_batch import BOOT, _seq

pytestmark = pytest.mark.browser

MEMBERS = [str(uuid.UUID(int=i + 1)) for i in range(50)]


def finding(alert_id: str, severity: str, message: str, **kw: Any) -> Alert:
    now = time.time()
    return Alert(
        host_id=HOST, boot_id=BOOT, seq=next(_seq), ts_ns=time.monotonic_ns(), ts_wall=now, provider="nettrail",
        probe="alert", rule_id="K10", condition="close-wait", severity=severity, start=now, alert_id=alert_id,
        message=message, **kw,
    )  # fmt: skip


def test_a_grouped_finding_links_its_member_sockets_and_leads_the_overview(server: Server, page: Any) -> None:
    leak = "leaky (pid 700) on 10.0.0.2:8080 holds 200 sockets in CLOSE_WAIT"
    server.ingest([finding("k10-members", "warning", leak, members=200, member_conn_uuids=MEMBERS, tgid=700)])
    server.ingest([finding(f"k10-notice-{i}", "notice", f"newer notice {i}") for i in range(3)])

    page.goto(f"{server.url}/alerts/?rule=K10")
    page.wait_for_selector("body[data-loaded='1']")
    row = page.locator("#alerts tbody tr", has_text=leak)
    assert row.count() == 1
    members = row.locator(".members")
    assert members.get_attribute("data-members") == "200"
    links = members.locator("a.member")
    assert links.count() == 50
    assert links.first.inner_text() == MEMBERS[0][:8]
    assert links.first.get_attribute("href") == f"/connections/{MEMBERS[0]}/?host={HOST}"
    assert members.inner_text().startswith("200 sockets: ") and members.inner_text().endswith(" and 150 more")
    screenshot(page, "alert-members")

    page.goto(f"{server.url}/")
    page.locator("#latest-alerts tbody tr", has_text=leak).wait_for()
    first = page.locator("#latest-alerts tbody tr").first  # before the three newer notices
    assert leak in first.inner_text() and "· 200 sockets" in first.inner_text()

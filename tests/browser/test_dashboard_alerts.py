"""The alerts page: filter by rule and severity, acknowledge an alert, open its evidence."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from .conftest import Server, screenshot

pytestmark = pytest.mark.browser


def test_an_alert_can_be_filtered_acknowledged_and_its_evidence_opened(
    server: Server, page: Any, ingested: Any
) -> None:
    page.goto(f"{server.url}/alerts/?severity=warning&rule=K1")
    page.wait_for_selector("body[data-loaded='1']")
    row = page.locator("#alerts tbody tr", has_text=f":{ingested.sport}")
    assert row.count() == 1
    page.goto(f"{server.url}/alerts/?severity=critical")
    page.wait_for_selector("body[data-loaded='1']")
    assert page.locator("#alerts tbody tr", has_text=f":{ingested.sport}").count() == 0
    page.goto(f"{server.url}/alerts/?rule=K1&acked=no")
    page.wait_for_selector("body[data-loaded='1']")
    row = page.locator("#alerts tbody tr", has_text=f":{ingested.sport}")
    row.locator("button.evidence").click()
    page.locator("#evidence-panel").wait_for(state="visible")
    seqs = page.locator("#evidence tbody tr td:first-child").all_inner_texts()
    assert [int(s) for s in seqs] == ingested.alert_seqs
    assert page.locator("#evidence tbody tr").first.inner_text().count("tcp_retransmit") == 1
    screenshot(page, "alerts")
    row.locator("button.ack").focus()
    page.keyboard.press("Enter")
    row.locator(".acked").wait_for()
    assert row.locator(".acked").inner_text().startswith("admin, ")
    alert_id = row.get_attribute("data-id")
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    listed = requests.get(f"{server.url}/api/dash/alerts?acked=yes", cookies=cookies, timeout=10).json()["alerts"]
    assert [a["id"] for a in listed if a["id"] == int(alert_id or 0)] == [int(alert_id or 0)]
    assert listed[0]["acked_by"] == "admin"

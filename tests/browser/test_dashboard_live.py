"""The connections table is live: a connection ingested while the page is open appears
(and its state changes) without a reload, within 2 seconds."""

from __future__ import annotations

import time
from typing import Any

import pytest
from conftest import HOST, Server, screenshot
from dashboard_batch import build

pytestmark = pytest.mark.browser


def test_a_new_connection_appears_in_the_live_table_within_two_seconds(server: Server, page: Any) -> None:
    page.goto(f"{server.url}/connections/")
    page.wait_for_function(f"(document.body.dataset.liveGroups || '').split(' ').includes('host.{HOST}')", timeout=5000)
    batch = build(HOST, sport=40200, cookie=200)
    opened = [r for r in batch.records if r.kind == "tcp_state" and r.state in ("SYN_SENT", "ESTABLISHED")]
    server.ingest(opened)
    sent = time.monotonic()
    row = page.locator(f'#conns tbody tr[data-uuid="{batch.uuid}"]')
    row.wait_for(timeout=2000)
    print(f"new connection visible {time.monotonic() - sent:.3f} s after ingest")
    assert row.locator('[data-col="state"]').inner_text() == "ESTABLISHED"
    assert row.locator("td").nth(2).inner_text() == "curl"
    assert "127.0.0.1:40200" in row.inner_text()
    rest = [r for r in batch.records if r not in opened]
    server.ingest(rest)  # the close: the same row changes state in place
    page.wait_for_function(
        f"""document.querySelector('#conns tr[data-uuid="{batch.uuid}"] [data-col="state"]').textContent === 'CLOSED'""",
        timeout=2000,
    )
    assert page.locator(f'#conns tbody tr[data-uuid="{batch.uuid}"]').count() == 1
    screenshot(page, "connections")

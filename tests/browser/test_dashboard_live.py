"""The connections table is live: a connection ingested while the page is open appears
(and its state changes) without a reload, within 2 seconds."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from .conftest import HOST, Server, screenshot
from .dashboard_batch import build

pytestmark = pytest.mark.browser


def test_a_new_connection_appears_in_the_live_table_within_two_seconds(server: Server, page: Any) -> None:
    received: list[int] = []  # ids of the records messages the page got, in order
    acked: list[int] = []  # ids the page acknowledged
    page.on("websocket", lambda ws: watch_live_frames(ws, received, acked))
    page.goto(f"{server.url}/connections/")
    page.wait_for_function(
        f"(document.body.dataset.liveGroups || '').split(' ').includes('host.{HOST}')", timeout=30_000
    )
    batch = build(HOST, sport=40200, cookie=200)
    opened = [r for r in batch.records if r.kind == "tcp_state" and r.state in ("SYN_SENT", "ESTABLISHED")]
    server.ingest(opened)
    sent = time.monotonic()
    row = page.locator(f'#conns tbody tr[data-uuid="{batch.uuid}"]')
    row.wait_for(timeout=30_000)
    print(f"new connection visible {time.monotonic() - sent:.3f} s after ingest")
    assert row.locator('[data-col="state"]').inner_text() == "ESTABLISHED"
    assert row.locator("td").nth(2).inner_text() == "curl"
    assert "127.0.0.1:40200" in row.inner_text()
    rest = [r for r in batch.records if r not in opened]
    server.ingest(rest)  # the close: the same row changes state in place
    page.wait_for_function(
        f"""document.querySelector('#conns tr[data-uuid="{batch.uuid}"] [data-col="state"]').textContent === 'CLOSED'""",
        timeout=30_000,
    )
    assert page.locator(f'#conns tbody tr[data-uuid="{batch.uuid}"]').count() == 1
    # Every records message is acknowledged with its id, so the server's flow control
    # (a window of unacknowledged messages, then dropping a slow page) is engaged.
    for _ in range(500):  # the ack frame follows the handled message (bounded wait, 10 s)
        if acked == received:
            break
        page.wait_for_timeout(20)
    assert len(received) >= 2  # the opening and the close came as separate pushes
    assert acked == received
    screenshot(page, "connections")


def watch_live_frames(ws: Any, received: list[int], acked: list[int]) -> None:
    if not ws.url.endswith("/ws/live/"):
        return

    def got(payload: str | bytes) -> None:
        msg = json.loads(payload)
        if msg.get("type") == "records":
            received.append(msg["id"])

    def sent(payload: str | bytes) -> None:
        msg = json.loads(payload)
        if "ack" in msg:
            acked.append(msg["ack"])

    ws.on("framereceived", got)
    ws.on("framesent", sent)

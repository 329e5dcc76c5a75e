"""A page that falls behind the live feed is told exactly how many records it missed: a visible
banner with the count and a Reload button (the server's `gap` message, docs/api.md).

The page's JavaScript is paused through the DevTools protocol (Debugger.pause) while 60,000
records are ingested, so it acknowledges nothing: the server sends its window of messages,
overflows its bounded buffer and counts the rest. Resumed, the page handles and acknowledges
what it was sent, and the server answers with the gap and closes; the banner must show
60,000 minus the records the page received.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from ingest_stub import make_records

from .conftest import HOST, Server, screenshot

pytestmark = pytest.mark.browser
BURST = 60_000  # over the server's default buffer of 50,000 records per client
FIRST_SEQ = 50_000_000  # clear of every other browser test's records of HOST


def test_a_page_that_fell_behind_shows_the_exact_number_of_missed_records(server: Server, page: Any) -> None:
    received: list[int] = []  # records per records message the page got
    gaps: list[dict[str, Any]] = []

    def watch(ws: Any) -> None:
        if not ws.url.endswith("/ws/live/"):
            return

        def got(payload: str | bytes) -> None:
            msg = json.loads(payload)
            if msg.get("type") == "records":
                received.append(len(msg["records"]))
            elif msg.get("type") == "gap":
                gaps.append(msg)

        ws.on("framereceived", got)

    page.on("websocket", watch)
    page.goto(f"{server.url}/")
    page.wait_for_function(
        f"(document.body.dataset.liveGroups || '').split(' ').includes('host.{HOST}')", timeout=10000
    )
    cdp = page.context.new_cdp_session(page)
    cdp.send("Debugger.enable")
    cdp.send("Debugger.pause")  # the next JavaScript statement (the first live message) stops
    for start in range(FIRST_SEQ, FIRST_SEQ + BURST, 10_000):
        server.ingest(make_records(start, 10_000, host=HOST))
    page.wait_for_timeout(1000)  # let the last pushes reach the browser (it cannot ack anyway)
    cdp.send("Debugger.resume")
    cdp.send("Debugger.disable")
    banner = page.locator("#live-gap")
    banner.wait_for(timeout=30000)
    assert len(gaps) == 1 and gaps[0]["dropped"] is True
    missed = BURST - sum(received)
    assert gaps[0]["missed"] == missed > 0
    assert banner.inner_text().startswith(f"Live view incomplete: {missed:,} records missed. Reload to see everything.")
    assert banner.locator("button", has_text="Reload").count() == 1
    screenshot(page, "live-gap")

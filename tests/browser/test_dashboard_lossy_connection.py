"""A lossy connection's page stays readable (issue 18 item 8).

The stored connection carries 302 retransmission records: the two of the standard batch
plus a burst of 100 early in ESTABLISHED (one run with them: no gap of a second, no state
change between) and a burst of 200 in FIN_WAIT_1 (a second run, cut by the state
changes around it). The state timeline shows two run rows instead of 302, the charts sit
within the first screen, the retransmission markers are aggregated (fewer markers than
retransmissions, a count on each), and the time axes use the 24-hour format.
"""

from __future__ import annotations

import re
import time
from typing import Any

import msgspec
import pytest

from translators.records import TcpRetransmit, TcpStateChange

from .conftest import HOST, Server, screenshot
from .dashboard_batch import MSS, _seq, build

pytestmark = pytest.mark.browser

EARLY = 100  # at 0.1 s + 2 ms each, joining the batch's retransmits at 0.86 s and 1.49 s
LATE = 200  # at 2.51 s + 0.4 ms each, between FIN_WAIT_1 (2.5 s) and FIN_WAIT_2 (2.6 s)


@pytest.fixture(scope="module")
def lossy(server: Server) -> Any:
    batch = build(HOST, sport=40800, cookie=800, now=time.time())
    first = next(r for r in batch.records if isinstance(r, TcpStateChange))
    model = next(r for r in batch.records if isinstance(r, TcpRetransmit))
    extra = []
    for k, offset in [(k, 0.1 + k * 0.002) for k in range(EARLY)] + [(k, 2.51 + k * 0.0004) for k in range(LATE)]:
        extra.append(
            msgspec.structs.replace(
                model,
                seq=next(_seq),
                ts_ns=first.ts_ns + int(offset * 1e9),
                ts_wall=first.ts_wall + offset,
                tcp_seq=(model.tcp_seq or 0) + k * MSS,
                retrans_kind="rto" if offset < 2 else "tlp",
            )
        )
    batch.records.extend(extra)
    server.ingest(batch.records)
    return batch


def test_retransmissions_are_grouped_into_runs_and_the_charts_stay_on_the_first_screen(
    server: Server, page: Any, lossy: Any
) -> None:
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{server.url}/connections/{lossy.uuid}/")
    page.wait_for_selector("body[data-loaded='1']")
    runs = page.locator("#timeline li[data-mark='retransmits']")
    assert runs.evaluate_all("els => els.map(e => Number(e.dataset.count))") == [EARLY + 2, LATE]
    assert page.locator("#timeline li").count() == 6 + 2  # six state changes, two runs
    assert (
        runs.nth(0)
        .locator("span")
        .last.inner_text()
        .startswith(f"{EARLY + 2} segments retransmitted ({EARLY + 2} rto), {(EARLY + 2) * MSS:,} bytes; ")
    )
    assert (
        runs.nth(1)
        .locator("span")
        .last.inner_text()
        .startswith(f"{LATE} segments retransmitted ({LATE} tlp), {LATE * MSS:,} bytes; ")
    )
    screenshot(page, "lossy-connection")
    for chart in ("chart-cwnd", "chart-rtt"):
        box = page.locator(f"#{chart} canvas").bounding_box()
        # the first row of charts starts on the first screen, at least half of it in view
        assert box is not None and box["y"] + box["height"] / 2 <= 900, (chart, box)
        markers = page.evaluate(f"NT.markBuckets('{chart}')")
        width = page.evaluate(f"NT.charts['{chart}'].bbox.width / devicePixelRatio")
        # one marker per 24 px bucket at most, however many retransmissions fall in it
        assert 2 <= markers <= width / 24 + 1, (chart, markers)
    ticks = page.evaluate("NT.charts['chart-cwnd'].axes[0]._values")
    assert ticks and all(re.fullmatch(r"\d\d:\d\d:\d\d(\n\d{4}-\d\d-\d\d)?", t) for t in ticks), ticks
    assert re.fullmatch(r"\d\d:\d\d:\d\d\n\d{4}-\d\d-\d\d", ticks[0]), ticks  # the date on the first tick


def test_the_one_time_format_puts_the_date_where_the_day_changes(server: Server, page: Any, lossy: Any) -> None:
    page.goto(f"{server.url}/connections/{lossy.uuid}/")
    page.wait_for_selector("body[data-loaded='1']")
    # 2026-01-01 23:59:59.5 and 2026-01-02 00:00:01.25 local time, then the same day again
    out = page.evaluate(
        """() => {
      const a = new Date(2026, 0, 1, 23, 59, 59, 500).getTime() / 1000;
      const b = new Date(2026, 0, 2, 0, 0, 1, 250).getTime() / 1000;
      return [NT.stamps([a, b, b + 1]), NT.axisTime(null, [a, b, b + 60]), NT.datetime(b)];
    }"""
    )
    assert out == [
        ["2026-01-01 23:59:59.500", "2026-01-02 00:00:01.250", "00:00:02.250"],
        ["23:59:59\n2026-01-01", "00:00:01\n2026-01-02", "00:01:01"],
        "2026-01-02 00:00:01",
    ]

"""Layouts at 900 px and 1440 px (issue 18 item 7): every table keeps what matters in view.

A connection whose alert message is several thousand pixels long, and a drop whose kernel
location is a long symbol, are ingested; at both widths the alert's Evidence and
Acknowledge buttons, the connections table's Bytes, Retrans and Anomaly columns and the
Buffers page's exact Total are inside the viewport and not scrolled away inside their
panel, and the overview's numbers are not clipped.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from translators.records import Alert, DropCount

from .conftest import HOST, Server, screenshot
from .dashboard_batch import _seq, build

pytestmark = pytest.mark.browser

WIDTHS = (900, 1440)
LONG_MESSAGE = "139 of 1904 segments (7.3%) retransmitted toward 10.99.7.20:5201 " * 40
LONG_LOCATION = "tcp_v4_do_rcv_with_a_long_inlined_symbol_name+0x1a4/0x2c0"

# The element's box lies inside the viewport and inside every ancestor that clips or
# scrolls (a column scrolled away inside .table-wrap is as hidden as one off-screen).
IN_VIEW = """(el) => {
  const r = el.getBoundingClientRect();
  if (r.width === 0 || r.left < 0 || r.right > window.innerWidth + 0.5) return false;
  for (let p = el.parentElement; p; p = p.parentElement) {
    const ov = getComputedStyle(p).overflowX;
    if (ov === "visible") continue;
    const b = p.getBoundingClientRect();
    if (r.left < b.left - 0.5 || r.right > b.right + 0.5) return false;
  }
  return true;
}"""


@pytest.fixture(scope="module")
def lossy(server: Server) -> Any:
    batch = build(HOST, sport=40700, cookie=700)
    alert = next(r for r in batch.records if isinstance(r, Alert))
    drop = next(r for r in batch.records if isinstance(r, DropCount))
    batch.records.append(msgspec.structs.replace(alert, seq=next(_seq), message=LONG_MESSAGE.strip()))
    batch.records.append(msgspec.structs.replace(drop, seq=next(_seq), drop_location=LONG_LOCATION))
    server.ingest(batch.records)
    return batch


@pytest.fixture(params=WIDTHS, ids=[f"{w}px" for w in WIDTHS])
def sized(request: Any, page: Any) -> Any:
    page.set_viewport_size({"width": request.param, "height": 900})
    return page


def in_view(locator: Any) -> bool:
    return bool(locator.evaluate(IN_VIEW))


def test_a_long_alert_message_wraps_and_its_buttons_stay_in_view(server: Server, sized: Any, lossy: Any) -> None:
    sized.goto(f"{server.url}/alerts/?host={HOST}")
    sized.wait_for_selector("body[data-loaded='1']")
    row = sized.locator("#alerts tbody tr", has_text=LONG_MESSAGE[:60]).first
    row.wait_for()
    assert in_view(row.locator("button.evidence"))
    assert in_view(row.locator("button.ack"))
    assert in_view(row.locator("td.msg"))
    assert row.locator("td.msg .clamp").get_attribute("title") == LONG_MESSAGE.strip()  # cut at 3 lines
    assert row.locator("td.msg").evaluate("e => e.getBoundingClientRect().height") < 80
    screenshot(sized, f"layout-alerts-{sized.viewport_size['width']}")


def test_the_connections_key_columns_stay_in_view(server: Server, sized: Any, lossy: Any) -> None:
    sized.goto(f"{server.url}/connections/?q=sport+40700")
    row = sized.locator(f'#conns tbody tr[data-uuid="{lossy.uuid}"]')
    row.wait_for()
    for col in ("local", "remote", "state", "bytes", "retrans", "alerts"):
        assert in_view(row.locator(f'[data-col="{col}"]')), col
        assert in_view(sized.locator(f'#conns th[data-sort="{col}"]')), col
    assert row.locator('[data-col="alerts"]').inner_text() == "2 (K1)"
    screenshot(sized, f"layout-connections-{sized.viewport_size['width']}")


def test_the_exact_drop_totals_stay_in_view(server: Server, sized: Any, lossy: Any) -> None:
    sized.goto(f"{server.url}/buffers/")
    sized.wait_for_selector("body[data-loaded='1']")
    cell = sized.locator("#exact tbody tr", has_text=LONG_LOCATION[:16]).locator("td")
    cell.first.wait_for()
    assert in_view(sized.locator("#exact th").last)
    assert in_view(cell.last)
    assert cell.nth(2).get_attribute("title") == LONG_LOCATION  # cut, with the whole symbol as a tooltip
    assert in_view(cell.nth(2))


def test_the_overviews_numbers_are_not_clipped(server: Server, sized: Any, lossy: Any) -> None:
    sized.goto(f"{server.url}/")
    sized.wait_for_selector("#hosts tbody td.num")
    clipped = sized.locator("#hosts td.num, #hosts th").evaluate_all(
        "els => els.filter(e => e.scrollWidth > e.clientWidth).map(e => e.textContent)"
    )
    assert clipped == []
    for cell in sized.locator("#hosts tbody tr").first.locator("td").all():
        assert in_view(cell), cell.inner_text()

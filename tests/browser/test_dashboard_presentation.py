"""Presentation (issue 34 item 7, and item 6's open sockets): no clipped text at 900 px and
1440 px on the Overview, a connection and Alerts; one date-time format with a space; a
one-sample chart's time axis is a minute around its sample, not years; plural forms; an
open socket is "open for" the time since it opened, and a LISTEN row never says "0 µs";
unix-socket drops off the Buffers page until ticked; the tab icon.
"""

from __future__ import annotations

import re
import time
from typing import Any

import msgspec
import pytest

from translators.records import Alert, SiftrSample, SkbDrop, TcpStateChange, connection_uuid

from .conftest import HOST, PAINTED, Server, screenshot
from .dashboard_batch import BOOT, _seq, build

pytestmark = pytest.mark.browser

WIDTHS = (900, 1440)
MESSAGE = (
    "139 of 1904 segments (7.3%) retransmitted toward 10.99.7.20:5201 by iperf3 (pid 4242) "
    "over three 30 s windows: a lossy path"
)
ONE_SAMPLE = 130  # of dashboard_batch's SIFTR samples: one with a finite ssthresh
ONE_SAMPLE_S = 30  # common.js ONE_SAMPLE_S

# Every shown table cell, heading and alert message whose text overflows its box, or whose
# box lies outside the viewport or a clipping ancestor (a panel); a .table-wrap is a frame
# with its own scroll bar for the widest tables (tcpdebug at 900 px), so it does not count.
CLIPPED = """(sel) => [...document.querySelectorAll(sel)].filter((e) => {
  if (!e.getClientRects().length) return false;
  if (e.scrollWidth > e.clientWidth + 1) return true;
  const r = e.getBoundingClientRect();
  if (r.left < -0.5 || r.right > window.innerWidth + 0.5) return true;
  for (let p = e.parentElement; p; p = p.parentElement) {
    if (getComputedStyle(p).overflowX === "visible" || p.classList.contains("table-wrap")) continue;
    const b = p.getBoundingClientRect();
    if (r.left < b.left - 0.5 || r.right > b.right + 0.5) return true;
  }
  return false;
}).map((e) => `${e.tagName}#${e.closest("table, section")?.id || ""}: ${e.textContent.trim().slice(0, 50)}`)"""
CELLS = "td, th, .clamp"


@pytest.fixture(scope="module")
def story(server: Server) -> Any:
    """A connection with a message-sized alert, a connection with one SIFTR sample, an open
    connection and a listening socket."""
    batch = build(HOST, sport=41300, cookie=1300)
    alert = next(r for r in batch.records if isinstance(r, Alert))
    batch.records.append(msgspec.structs.replace(alert, seq=next(_seq), message=MESSAGE, start=alert.start + 0.1))
    lone = build(HOST, sport=41301, cookie=1301)
    samples = [r for r in lone.records if isinstance(r, SiftrSample)]
    keep = samples[ONE_SAMPLE]
    lone.records = [r for r in lone.records if not isinstance(r, SiftrSample) or r is keep]
    server.ingest(batch.records + lone.records)
    opened = time.time() - 90.0
    states = [
        _state(41302, 1302, opened, "CLOSED", "SYN_SENT"),
        _state(41302, 1302, opened + 0.01, "SYN_SENT", "ESTABLISHED"),
    ]
    listen = [_state(41303, 1303, opened, "CLOSED", "LISTEN", dst="0.0.0.0", dport=0)]
    server.ingest(states + listen)
    return {
        "batch": batch,
        "lone": lone,
        "sample_t": keep.ts_wall,
        "sample": keep,
        "open": states[0].conn_uuid,
        "listen": listen[0].conn_uuid,
    }


def _state(sport: int, cookie: int, at: float, prev: str, state: str, dst: str = "127.0.0.1", dport: int = 8443) -> Any:
    return TcpStateChange(
        host_id=HOST, boot_id=BOOT, seq=next(_seq), ts_ns=int(at * 1e9), ts_wall=at, provider="tcp",
        probe="state-change", conn_uuid=connection_uuid(HOST, BOOT, cookie), sock_cookie=cookie, ip_ver=4,
        src="127.0.0.1", sport=sport, dst=dst, dport=dport, prev_state=prev, state=state, caused_by="local",
        pid=4343, tgid=4343, comm="server", uid=1000,
    )  # fmt: skip


@pytest.fixture(params=WIDTHS, ids=[f"{w}px" for w in WIDTHS])
def sized(request: Any, page: Any) -> Any:
    page.set_viewport_size({"width": request.param, "height": 900})
    return page


def clipped(page: Any) -> str:
    """The clipped elements, one a line ("" when none)."""
    return "\n".join(page.evaluate(CLIPPED, CELLS))


def whole(locator: Any) -> bool:
    """The alert message is shown whole: it wraps, nothing is cut on either axis."""
    return bool(locator.evaluate("e => e.scrollWidth <= e.clientWidth + 1 && e.scrollHeight <= e.clientHeight + 1"))


def test_nothing_on_the_overview_is_clipped(server: Server, sized: Any, story: Any) -> None:
    sized.goto(f"{server.url}/")
    message = sized.locator("#latest-alerts .clamp", has_text=MESSAGE)
    message.wait_for()
    sized.wait_for_selector("#top-retrans tbody tr")
    assert clipped(sized) == ""
    assert whole(message)
    screenshot(sized, f"presentation-overview-{sized.viewport_size['width']}")


def test_nothing_on_a_connections_page_is_clipped(server: Server, sized: Any, story: Any) -> None:
    batch = story["batch"]
    sized.goto(f"{server.url}/connections/{batch.uuid}/?host={HOST}")
    sized.wait_for_selector("body[data-loaded='1']")
    message = sized.locator("#alerts td.msg", has_text=MESSAGE)
    message.wait_for()
    assert clipped(sized) == ""
    assert whole(message)
    screenshot(sized, f"presentation-connection-{sized.viewport_size['width']}")


def test_nothing_on_the_alerts_page_is_clipped(server: Server, sized: Any, story: Any) -> None:
    sized.goto(f"{server.url}/alerts/?host={HOST}")
    sized.wait_for_selector("body[data-loaded='1']")
    row = sized.locator("#alerts tbody tr", has_text=MESSAGE).first
    row.wait_for()
    # Messages wrap; past three lines they are cut there with the whole text as the tooltip
    # (a message thousands of pixels long: test_dashboard_layouts.py). At 1440 px an
    # ordinary one is shown whole; at 900 px its column is narrow enough to reach the cut.
    message = row.locator(".clamp")
    assert message.get_attribute("title") == MESSAGE
    if sized.viewport_size["width"] >= 1440:
        assert whole(message)
    assert clipped(sized) == ""


DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")


def test_every_date_time_reads_date_space_time(server: Server, page: Any, story: Any) -> None:
    page.goto(f"{server.url}/alerts/?host={HOST}")
    page.wait_for_selector("body[data-loaded='1']")
    start = page.locator("#alerts tbody tr", has_text=MESSAGE).first.locator("td").first
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}", start.inner_text())
    uuid = story["batch"].uuid
    for path in (
        "/",
        "/alerts/",
        f"/connections/{uuid}/?host={HOST}",
        "/connections/",
        "/buffers/",
        "/udp/",
        "/counters/",
    ):
        page.goto(server.url + path)
        page.wait_for_function("document.querySelector('main td') !== null", timeout=30_000)
        text = page.locator("main").inner_text()
        dates = [m.start() for m in DATE.finditer(text)]
        assert [text[i : i + 19] for i in dates if not DATE_TIME.match(text, i)] == [], path


def test_a_one_sample_chart_spans_a_minute_around_its_sample(server: Server, page: Any, story: Any) -> None:
    page.goto(f"{server.url}/connections/{story['lone'].uuid}/?host={HOST}")
    page.wait_for_selector("body[data-loaded='1']")
    page.wait_for_function("NT.charts && NT.charts['chart-cwnd']")
    for chart in ("chart-cwnd", "chart-rtt", "chart-wnd", "chart-inflight"):
        lo, hi = page.evaluate(f"[NT.charts['{chart}'].scales.x.min, NT.charts['{chart}'].scales.x.max]")
        assert (round(lo, 3), round(hi, 3)) == (
            round(story["sample_t"] - ONE_SAMPLE_S, 3),
            round(story["sample_t"] + ONE_SAMPLE_S, 3),
        ), chart
    assert page.evaluate(PAINTED, ["chart-cwnd", "#0b5cad"]) > 0  # cwnd's point
    assert page.evaluate(PAINTED, ["chart-cwnd", "#b3261e"]) > 0  # ssthresh's point
    legend = page.evaluate(
        """(t) => { const u = NT.charts['chart-cwnd'];
          u.setCursor({ left: u.valToPos(t, 'x'), top: 10 });
          return [...u.root.querySelectorAll('.u-legend .u-series')].map((s) => s.textContent); }""",
        story["sample_t"],
    )
    sample = story["sample"]  # finite ssthresh: its value, not the "infinite" note
    assert legend[1:] == [f"cwnd{sample.snd_cwnd / 1000:.1f} kB", f"ssthresh{sample.snd_ssthresh / 1000:.1f} kB"]
    screenshot(page, "presentation-one-sample")


def test_counts_take_the_plural_only_when_not_one(server: Server, page: Any, story: Any) -> None:
    page.goto(f"{server.url}/alerts/?host={HOST}&rule=K1")
    page.wait_for_selector("body[data-loaded='1']")
    n = page.locator("#alerts tbody tr").count()
    assert n >= 2
    assert page.locator("#count").inner_text() == f"{n:,} alerts"
    row = page.locator("#alerts tbody tr", has_text=MESSAGE).first
    evidence = len(story["batch"].alert_seqs)
    assert row.locator("button.evidence").inner_text() == f"{evidence} record{'' if evidence == 1 else 's'}"
    page.goto(f"{server.url}/alerts/?host={HOST}&severity=none-such")
    page.wait_for_selector("body[data-loaded='1']")
    assert page.locator("#count").inner_text() == "0 alerts"
    page.goto(f"{server.url}/connections/?q=sport+41302")
    page.wait_for_function("document.querySelector('#total').textContent === '1'", timeout=30_000)
    assert page.locator("#conns-h").inner_text() == "1 connection"


def test_an_open_socket_is_open_for_the_time_since_it_opened(server: Server, page: Any, story: Any) -> None:
    page.goto(f"{server.url}/connections/?q=sport+41302+or+sport+41303")
    for uuid in (story["open"], story["listen"]):
        cell = page.locator(f'#conns tbody tr[data-uuid="{uuid}"] [data-col="duration"]')
        cell.wait_for()
        m = re.fullmatch(r"open for (\d+\.\d+) (s|min)", cell.inner_text())
        assert m, cell.inner_text()
        assert float(m[1]) * (60 if m[2] == "min" else 1) >= 90  # opened 90 s before the ingest
    page.goto(f"{server.url}/connections/{story['open']}/?host={HOST}")
    page.wait_for_selector("body[data-loaded='1']")
    duration = page.locator("#summary div", has_text="Duration").locator("dd").inner_text()
    assert duration.startswith("open for ")
    assert "µs" not in duration


def test_unix_socket_drops_stay_off_the_buffers_page_until_ticked(server: Server, page: Any) -> None:
    t = time.time() - 3
    closes = [
        SkbDrop(
            host_id=HOST,
            boot_id=BOOT,
            seq=next(_seq),
            ts_ns=int((t + i * 0.01) * 1e9),
            ts_wall=t + i * 0.01,
            provider="skb",
            probe="m-free",
            drop_reason=2,
            drop_reason_str="SOCKET_CLOSE",
            drop_location="unix_release_sock+0x1c4",
            comm="chromium-unix",
            tgid=7777,
        )  # fmt: skip
        for i in range(3)
    ]
    server.ingest(closes)
    page.goto(f"{server.url}/buffers/")
    page.wait_for_selector("body[data-loaded='1']")
    assert page.locator("#by-process tbody tr", has_text="chromium-unix").count() == 0
    note = page.locator("#unix-note")
    assert int(note.get_attribute("data-drops")) >= 3
    assert re.fullmatch(r"[\d,]+ drop events of unix sockets left out\.", note.inner_text())
    page.check("#unix")
    row = page.locator("#by-process tbody tr", has_text="chromium-unix")
    row.wait_for()
    assert row.locator("td").all_inner_texts() == ["chromium-unix", "7777", "3"]
    assert page.url.endswith("/buffers/?unix=1")
    page.reload()
    page.wait_for_selector("body[data-loaded='1']")
    assert page.is_checked("#unix")
    page.locator("#by-process tbody tr", has_text="chromium-unix").wait_for()


def test_every_page_has_the_tab_icon(server: Server, page: Any) -> None:
    page.goto(f"{server.url}/")
    href = page.locator('link[rel="icon"]').get_attribute("href")
    assert href == "/static/dashboard/favicon.svg"
    icon = page.request.get(f"{server.url}/favicon.ico")  # what browsers ask for on their own
    assert (icon.status, icon.url, icon.headers["content-type"]) == (
        200,
        f"{server.url}/static/dashboard/favicon.svg",
        "image/svg+xml",
    )

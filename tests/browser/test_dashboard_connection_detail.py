"""The connection detail page: the state timeline in order with causes, the SIFTR and
time-sequence charts drawn (canvas pixels), tcpdebug/skb/drop/alert tables, and the
JSON export downloaded (the report document) and validated against docs/schema. Also measures a 100,000-point uPlot draw."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from report_schemas import validate_json

from .conftest import PAINTED, Server, screenshot
from .dashboard_batch import DROP_REASON, MSS, RETRANSMITTED, SIFTR_SAMPLES, STATES

pytestmark = pytest.mark.browser

# Each chart and the stroke colour of its first series (connection.js).
CHARTS = {
    "chart-cwnd": "#0b5cad",
    "chart-rtt": "#1f7a3a",
    "chart-wnd": "#5a3fa0",
    "chart-inflight": "#10243b",
    "chart-tseq": "#0b5cad",
}


def open_detail(server: Server, page: Any, uuid: str) -> None:
    page.goto(f"{server.url}/connections/{uuid}/")
    page.wait_for_selector("body[data-loaded='1']", timeout=10000)


def test_the_state_timeline_lists_the_states_in_order_with_who_caused_them(
    server: Server, page: Any, ingested: Any
) -> None:
    open_detail(server, page, ingested.uuid)
    states = page.locator("#timeline li.state").evaluate_all("els => els.map(e => e.dataset.state)")
    assert states == list(STATES)
    texts = page.locator("#timeline li.state").all_inner_texts()
    assert "CLOSED → SYN_SENT, caused by curl (pid 4242)" in texts[0]
    assert "SYN_SENT → ESTABLISHED, caused by remote peer 127.0.0.1:8443" in texts[1]
    assert "2.45 s" in texts[1]  # ESTABLISHED from 0.05 s to 2.5 s
    assert "(inferred)" in texts[5]
    # both retransmissions (0.86 s and 1.49 s) are one run: no quiet second between them
    runs = page.locator("#timeline li.mark-retransmit").evaluate_all("els => els.map(e => Number(e.dataset.count))")
    assert runs == [len(RETRANSMITTED)]


def test_every_chart_draws_on_its_canvas(server: Server, page: Any, ingested: Any) -> None:
    open_detail(server, page, ingested.uuid)
    for chart, colour in CHARTS.items():
        assert page.evaluate(PAINTED, [chart, colour]) > 100, f"{chart} has no {colour} series drawn"
    assert page.evaluate(PAINTED, ["chart-tseq", "#b3261e"]) > 10  # the retransmissions, in red
    assert page.evaluate(PAINTED, ["chart-cwnd", "#e8590c"]) > 20  # the retransmission markers
    legend = page.locator("#chart-tseq .u-legend").inner_text()
    assert "retransmission" in legend and "SACK" in legend
    assert page.locator("#siftr-empty").is_hidden()
    screenshot(page, "connection-detail")


def test_the_charts_share_one_cursor_and_zoom_together(server: Server, page: Any, ingested: Any) -> None:
    open_detail(server, page, ingested.uuid)
    box = page.locator("#chart-cwnd .u-over").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
    left = page.evaluate("() => [...document.querySelectorAll('.chart .u-cursor-x')].map(e => e.style.transform)")
    assert len(set(left[:4])) == 1 and left[0]  # the four SIFTR charts show the cursor at one x
    scales = "() => ['chart-cwnd', 'chart-rtt', 'chart-wnd', 'chart-inflight'].map(id => [NT.charts[id].scales.x.min, NT.charts[id].scales.x.max])"
    before = page.evaluate(scales)
    page.mouse.move(box["x"] + box["width"] * 0.2, box["y"] + 20)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.4, box["y"] + 20, steps=5)
    page.mouse.up()
    after = page.evaluate(scales)
    assert len({tuple(r) for r in after}) == 1  # all four zoomed to the same range
    (lo, hi), (lo0, hi0) = after[0], before[0]
    assert lo0 < lo < hi < hi0 and (hi - lo) < 0.5 * (hi0 - lo0)


def test_the_tables_show_tcpdebug_buffers_drops_and_alerts(server: Server, page: Any, ingested: Any) -> None:
    open_detail(server, page, ingested.uuid)
    assert page.locator("#tcpdebug tbody tr").count() == 5
    assert page.locator("#tcpdebug tbody tr").first.locator("td").nth(2).inner_text() == "CONNECT"
    assert page.locator("#skbs tbody tr").count() == 4  # three delivered buffers and the dropped one
    assert page.locator("#drops tbody tr").count() == 1
    assert DROP_REASON in page.locator("#drops tbody tr").inner_text()
    assert page.locator("#alerts tbody tr").count() == 1
    assert "K1" in page.locator("#alerts tbody tr").inner_text()


def test_the_json_export_downloads_the_connections_records(
    server: Server, page: Any, ingested: Any, tmp_path: Path
) -> None:
    open_detail(server, page, ingested.uuid)
    formats = page.locator("#exports a").evaluate_all("els => els.map(e => e.dataset.format)")
    assert formats[:4] == ["json", "xml", "text", "html"]
    with page.expect_download() as info:
        page.click("#exports a[data-format=json]")
    target = tmp_path / "export.json"
    info.value.save_as(target)
    doc = json.loads(target.read_text())
    validate_json(doc)  # the report document (webapp/reports), as /api/report writes it
    [conn] = doc["nettrail_report"]["connection"]
    assert conn["conn_uuid"] == ingested.uuid
    assert (conn["src"], conn["sport"], conn["dst"], conn["dport"]) == ("127.0.0.1", 40100, "127.0.0.1", 8443)
    assert [r["state"] for r in conn["tcp_state"]] == list(STATES)
    assert len(conn["siftr_sample"]) == SIFTR_SAMPLES
    assert len(conn["tcp_retransmit"]) == len(RETRANSMITTED)
    assert conn["tcp_retransmit"][0]["tcp_payload_len"] == MSS
    assert conn["skb_drop"][0]["drop_reason_str"] == DROP_REASON
    assert conn["alert"][0]["rule_id"] == "K1"
    assert conn["bytes_orig"] == 60 * MSS  # the Connection row, which the summary record filled


def test_a_100000_point_chart_draws_and_reports_its_time(server: Server, page: Any, ingested: Any) -> None:
    """Prints uPlot's time for 2 x 100,000 points and, as the peer measured in the same page,
    a bare canvas polyline through the same points (docs/benchmarks.md, "## Dashboard")."""
    open_detail(server, page, ingested.uuid)
    result = page.evaluate(
        """() => new Promise((resolve) => {
          const n = 100000, xs = new Float64Array(n), ys = new Float64Array(n), zs = new Float64Array(n);
          for (let i = 0; i < n; i++) { xs[i] = 1.7e9 + i * 0.001; ys[i] = Math.sin(i / 500) * 1e5 + i; zs[i] = (i * 7919) % 100003; }
          const box = document.createElement('div');
          box.style.width = '1200px';
          document.body.append(box);
          const t0 = performance.now();
          let drawn = null;
          const u = new uPlot({ width: 1200, height: 300, scales: { x: { time: true } },
            series: [{}, { stroke: 'blue' }, { stroke: 'red' }],
            hooks: { draw: [() => { if (drawn === null) drawn = performance.now() - t0; }] } }, [xs, ys, zs], box);
          const canvas = document.createElement('canvas');
          canvas.width = 1200; canvas.height = 300;
          box.append(canvas);
          const t1 = performance.now();
          const ctx = canvas.getContext('2d');
          for (const [col, color] of [[ys, 'blue'], [zs, 'red']]) {
            ctx.beginPath();
            ctx.strokeStyle = color;
            for (let i = 0; i < n; i++) ctx.lineTo((xs[i] - xs[0]) / (xs[n - 1] - xs[0]) * 1200, 300 - col[i] / 2e5 * 300);
            ctx.stroke();
          }
          ctx.getImageData(0, 0, 1, 1);  // wait for the raster
          const bare = performance.now() - t1;
          requestAnimationFrame(() => resolve({ ms: drawn, bare, points: u.data[0].length * 2 }));
        })"""
    )
    assert result["points"] == 200_000 and result["ms"] is not None
    print(
        f"\nuPlot: 2 series x 100,000 points drawn in {result['ms']:.1f} ms; bare canvas polyline (peer) "
        f"{result['bare']:.1f} ms; ratio {result['ms'] / result['bare']:.2f} (Chromium headless)"
    )

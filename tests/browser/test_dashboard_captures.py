"""The Captures page (issue 18 item 5): a capture uploaded from the menu's page, with its
progress shown, lands on a result page listing its connections with their Zeek
conn_state and history and every alert rule `nettrail analyze` reports on the same file;
its connections never count on the live Overview, show their conn_state on the
Connections page, and the Alerts page's host filter lists only its alerts.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from .capture_story import REFUSED_SERVICE, SCANNED_PORTS, write_story_capture
from .conftest import ROOT, Server, screenshot

HOST = "capture:story.pcap"


def analyze(path: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "nettrail.cli", "analyze", str(path), "--libxo", "json"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)["analyze"]
    return doc


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_story_capture(tmp_path_factory.mktemp("captures") / "story.pcap")


# The upload is throttled (Chrome DevTools network emulation) so that the browser sends the
# story's ~29 kB over ~3 s and reports progress on the way, as it does for a large file on a
# slow link. Unthrottled, loopback takes the whole body at once and the page shows only 0
# and 100 % (seen); throttled, Chromium sends the body in 16 KiB reads, so 16.4 kB (56 %) is
# shown between them.
UPLOAD_BYTES_PER_S = 10_000
# Every change of the progress text, with the bar's value and whether the status shows,
# reported to the test (window.ntProgress) as it happens: the page navigates away at the end.
WATCH_PROGRESS = """() => {
  const text = document.getElementById('upload-text');
  const bar = document.getElementById('upload-progress');
  const status = document.getElementById('upload-status');
  new MutationObserver(() => window.ntProgress(text.textContent, bar.value, !status.hidden))
    .observe(text, {childList: true, characterData: true, subtree: true});
}"""


@pytest.fixture(scope="module")
def uploaded(server: Server, browser: Any, admin_state: dict[str, Any], story: Path) -> dict[str, Any]:
    """Upload the story capture through the page once; what the page showed on the way."""
    context = browser.new_context(storage_state=admin_state, bypass_csp=True)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    progress: list[tuple[str, int, bool]] = []
    page.expose_function("ntProgress", lambda text, value, shown: progress.append((text, int(value), shown)))
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    conditions = {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": UPLOAD_BYTES_PER_S}
    cdp.send("Network.emulateNetworkConditions", conditions)
    page.goto(f"{server.url}/")
    page.click("nav >> text=Captures")
    page.wait_for_url(f"{server.url}/captures/")
    assert page.locator('nav a[aria-current="page"]').inner_text() == "Captures"
    page.evaluate(WATCH_PROGRESS)
    page.set_input_files("#capture", str(story))
    with page.expect_navigation(url=re.compile(r"/captures/\?host="), timeout=60_000):
        page.click("#upload-form button[type=submit]")
    screenshot(page, "captures-result")
    shown = {
        "url": page.url,
        "progress": progress,
        "size": page.evaluate("(n) => NT.bytes(n)", story.stat().st_size),
        "stored": page.locator("#stored").inner_text(),
        "rules": sorted(
            set(page.locator("#capture-alerts tbody tr").evaluate_all("rs => rs.map(r => r.dataset.rule)"))
        ),
        "states": page.locator("#capture-conns tbody td.conn-state").all_inner_texts(),
        "histories": page.locator("#capture-conns tbody td.history").all_inner_texts(),
        "listed": page.locator("#captures").inner_text(),
    }
    cdp.detach()
    context.close()
    assert errors == []
    return shown


def test_the_upload_shows_its_progress_and_lands_on_the_capture_result(uploaded: dict[str, Any], story: Path) -> None:
    size = story.stat().st_size
    total = uploaded["size"]  # NT.bytes(size): the page's own formatting
    assert total == f"{size / 1000:.1f} kB"
    progress = uploaded["progress"]
    # the bar starts at nothing sent of the file's size, and the status shows throughout
    assert progress[0] == (f"0 of {total} sent", 0, True)
    assert all(shown for _, _, shown in progress)
    # then the browser's upload progress events: "<sent> of <file> sent (<pct>%)", the bar at
    # pct; the request is the file and its form's few hundred bytes, said in the file's size
    steps = [(text, value) for text, value, _ in progress[1:-1]]
    parsed = [re.fullmatch(rf"(\d+(?:\.\d)? k?B) of {re.escape(total)} sent \((\d+)%\)", text) for text, _ in steps]
    assert steps and all(parsed), steps
    percents = [int(m.group(2)) for m in parsed if m]
    assert [value for _, value in steps] == percents
    assert percents == sorted(percents)  # it only moves forward
    # real progress: at least one value strictly between nothing and everything
    assert any(0 < pct < 100 for pct in percents), steps
    assert steps[-1][0] == f"{total} of {total} sent (100%)"
    # every byte sent: the server analyses it and the page moves on to the capture's result
    assert progress[-1] == (f"{total} sent; analysing…", 100, True)
    assert "/captures/?host=capture%3Astory.pcap&stored=" in uploaded["url"]
    assert re.fullmatch(
        rf"Stored \d+ records \(0 were already there\) under host {re.escape(HOST)}\.", uploaded["stored"]
    )
    assert size > 0 and "story.pcap" in uploaded["listed"]


def test_the_result_lists_every_connection_with_its_zeek_state_and_the_analyze_alert_rules(
    uploaded: dict[str, Any], story: Path
) -> None:
    doc = analyze(story)
    assert uploaded["rules"] == sorted({a["rule_id"] for a in doc["alert"]}) == ["K14", "K9", "P7"]
    assert sorted(uploaded["states"]) == sorted(c["conn_state"] for c in doc["connection"])
    assert uploaded["states"].count("REJ") == REFUSED_SERVICE + SCANNED_PORTS
    assert sorted(uploaded["histories"]) == sorted(c["history"] for c in doc["connection"])


def test_uploaded_connections_are_not_live_and_show_their_conn_state(
    server: Server, page: Any, uploaded: dict[str, Any]
) -> None:
    overview = page.request.get(f"{server.url}/api/dash/overview").json()
    assert HOST not in [h["host_id"] for h in overview["hosts"]]
    assert all(a["host_id"] != HOST for a in overview["alerts"])
    page.goto(f"{server.url}/connections/?q=" + quote(f'host "{HOST}" and dport 9100'))
    page.wait_for_function(f"document.getElementById('total').textContent === '{REFUSED_SERVICE}'")
    states = page.locator('#conns tbody td[data-col="state"]').all_inner_texts()
    assert states == ["REJ (Sr)"] * REFUSED_SERVICE
    page.locator("#conns tbody tr").first.locator("a").first.click()
    page.wait_for_function("document.body.dataset.loaded === '1'")
    assert "REJ (Zeek conn_state; history Sr)" in page.locator("#summary").inner_text()


def test_the_alerts_host_filter_lists_only_that_hosts_alerts(
    server: Server, page: Any, uploaded: dict[str, Any], ingested: Any
) -> None:
    everything = page.request.get(f"{server.url}/api/dash/alerts").json()["alerts"]
    assert {a["host_id"] for a in everything} - {HOST}, "another host's alerts exist (the package's batch)"
    page.goto(f"{server.url}/alerts/?host=" + quote(HOST, safe=""))
    page.wait_for_function("document.body.dataset.loaded === '1'")
    hosts = page.locator("#alerts tbody td.trunc").all_inner_texts()
    mine = [a for a in everything if a["host_id"] == HOST]  # K9, K14 and the P7 findings' alerts
    assert len(mine) >= 2 and hosts == [HOST] * len(mine)
    assert page.locator("#host").input_value() == HOST

"""The six stories of issue 18 found from the Overview, on real traffic: a collector
(`nettrail collect --alerts` with `nettrail up`'s default providers, eBPF, root) traces the
test's own network namespace and
ships to the webapp through the real ingest API while tests/browser/story_traffic.py runs
there. Each test starts at the Overview and follows the page's own links.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from nettrail.commands.up import COLLECTOR_PROVIDERS
from tests.alert_kernel_support import namespace
from tests.veth_lab import in_netns

from .conftest import HOST, ROOT, Server, screenshot
from .kernel_env import WARMUP_S, collecting, need_root_and_btf
from .story_traffic import DOWNLOAD_PORT, LOSSY_PORT, SHORT, SHORT_PORT, SLOW_PORT, UDP_DATAGRAMS, UDP_PORT

pytestmark = [pytest.mark.browser, pytest.mark.kernel, pytest.mark.slow]
NFT = """
table inet ntstory {
  chain input {
    type filter hook input priority 0; policy accept;
    tcp dport 7600 numgen random mod 100 < 10 counter drop
  }
}
"""


def _api(server: Server, cookies: dict[str, str], path: str, **params: Any) -> Any:
    return requests.get(f"{server.url}/api/dash/{path}", params=params, cookies=cookies, timeout=10).json()


@pytest.fixture(scope="module")
def stories(
    server: Server, browser: Any, admin_state: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    need_root_and_btf("to load eBPF programs and make a network namespace")
    cookies = {c["name"]: c["value"] for c in admin_state["cookies"]}
    tmp = tmp_path_factory.mktemp("stories")
    with namespace(f"ntstory{os.getpid() % 100000}", NFT, "ntstory") as (name, inode):
        # nettrail up's default set: every story must be found with what runs always on
        options = ("--providers", COLLECTOR_PROVIDERS, "--alerts", "--filter", f"netns={inode}")
        with collecting(server, tmp, *options) as col:
            lst = in_netns(name, socket.socket)
            lst.bind(("127.0.0.1", 7999))
            lst.listen(64)
            lst.settimeout(5)
            deadline = time.monotonic() + WARMUP_S
            # warm-up connections until the collector is tracing and shipping
            while _api(server, cookies, "connections", q="port 7999")["total"] == 0:
                assert col.proc.poll() is None, col.log()
                assert time.monotonic() < deadline, col.log()
                c = in_netns(name, socket.socket)
                c.settimeout(5)
                c.connect(("127.0.0.1", 7999))
                lst.accept()[0].close()
                c.close()
                time.sleep(1.0)
            lst.close()
            traffic = subprocess.run(
                ["ip", "netns", "exec", name, sys.executable, str(ROOT / "tests/browser/story_traffic.py")],
                capture_output=True, text=True, timeout=150, cwd=ROOT,
            )  # fmt: skip
            assert traffic.returncode == 0, traffic.stderr
            facts = json.loads(traffic.stdout.strip().splitlines()[-1])
            time.sleep(3.0)  # the last batches reach the webapp
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not _api(server, cookies, "alerts", host=HOST, rule="K14")["alerts"]:
        time.sleep(1)
    yield {"facts": facts, "cookies": cookies, "log": col.log_path.read_text()}


def overview(server: Server, page: Any) -> None:
    page.goto(f"{server.url}/")
    page.wait_for_selector(f'#hosts tbody tr[data-host="{HOST}"]')


def open_alert(server: Server, page: Any, rule: str, contains: str) -> str:
    """From the Overview: the menu's Alerts page, filtered by rule, and the alert's link."""
    overview(server, page)
    page.click("nav >> text=Alerts")
    page.wait_for_selector("body[data-loaded='1']")
    page.select_option("#rule", rule)
    page.click("#filters button[type=submit]")
    link = page.locator("#alerts tbody td.msg a", has_text=contains).first
    link.wait_for()
    message = str(link.get_attribute("title"))
    link.click()
    page.wait_for_url("**/connections/*/**")
    page.wait_for_selector("body[data-loaded='1']")
    return message


def summary(page: Any) -> dict[str, str]:
    items = page.locator("#summary > div").evaluate_all(
        "ds => ds.map(d => [d.querySelector('dt').textContent, d.querySelector('dd').textContent])"
    )
    return dict(items)


def test_time_wait_pile_up_per_destination(server: Server, page: Any, stories: dict[str, Any]) -> None:
    """First: `state TIME_WAIT` finds sockets that entered it in the last 60 s (as `ss` lists them).
    The Overview counts them per destination, and its row opens exactly those sockets, through
    the filter `... state TIME_WAIT ...` (one look: the sockets leave TIME_WAIT 60 s after the
    story made them, which a busy machine reaches if the test does more)."""
    overview(server, page)
    row = page.locator(f'#time-wait tbody tr[data-host="{HOST}"][data-dst="127.0.0.1:{SHORT_PORT}"]')
    row.wait_for()
    assert row.locator("td.num").inner_text() == str(SHORT)
    row.locator("a").click()
    page.wait_for_url("**/connections/?q=*")
    page.wait_for_function(f"document.getElementById('total').textContent === '{SHORT}'")
    assert "state TIME_WAIT" in page.input_value("#q")
    screenshot(page, "story-time-wait")


def test_loss_alert_opens_the_connection_with_its_retransmits(
    server: Server, page: Any, stories: dict[str, Any]
) -> None:
    overview(server, page)
    row = page.locator("#latest-alerts tbody tr", has_text="K1").first
    row.wait_for()
    message = open_alert(server, page, "K1", f"to 127.0.0.1:{LOSSY_PORT}")
    assert f"toward 127.0.0.1:{LOSSY_PORT}" in message or f"to 127.0.0.1:{LOSSY_PORT}" in message
    facts = summary(page)
    assert facts["Remote"] == f"127.0.0.1:{LOSSY_PORT}"
    # "N segments, B bytes": the kernel's unit (TcpRetransSegs), each record's segs summed
    retransmits = int(facts["Retransmitted"].split()[0].replace(",", ""))
    assert retransmits > 10
    # the timeline groups the connection's tcp_retransmit records into runs, one count per
    # record; a record may stand for several segments (GSO), so the runs never count more
    runs = page.locator("#timeline li.mark-retransmit").evaluate_all("ls => ls.map(l => Number(l.dataset.count))")
    assert runs and 0 < sum(runs) <= retransmits
    # item 4 from the always-on set: the time-sequence graph from the polled SIFTR samples,
    # each retransmission at its sequence, and the samples said to be polls
    assert "SIFTR samples" in page.locator("#tseq-source").inner_text()
    assert page.locator("#tseq-empty").is_hidden()
    drawn = page.evaluate("() => NT.charts['chart-tseq'].data.map((s) => s.filter((v) => v !== null).length)")
    assert drawn[1] > 1 and 0 < drawn[2] <= retransmits  # snd_nxt points; one point per tcp_retransmit record
    assert page.locator("#siftr-sampling").get_attribute("data-polled") == "true"
    assert page.locator("#siftr-sampling").inner_text().startswith("Polled (siftr-poll)")
    screenshot(page, "story-loss")


def test_zero_window_alert_opens_the_slow_readers_connection(
    server: Server, page: Any, stories: dict[str, Any]
) -> None:
    rules = _api(server, stories["cookies"], "alerts", host=HOST)["rules"]
    rule = next(r for r in ("K5", "K13") if r in rules)
    open_alert(server, page, rule, f":{SLOW_PORT}")
    assert f":{SLOW_PORT}" in summary(page)["Remote"] + summary(page)["Local"]
    screenshot(page, "story-zero-window")


def test_refused_connects_by_destination(server: Server, page: Any, stories: dict[str, Any]) -> None:
    overview(server, page)
    page.click("nav >> text=Alerts")
    page.wait_for_selector("body[data-loaded='1']")
    page.select_option("#rule", "K14")
    page.click("#filters button[type=submit]")
    alert = page.locator("#alerts tbody td.msg .clamp", has_text="to 127.0.0.1:9 failed").first
    alert.wait_for()
    assert "25 of 25 connection attempts to 127.0.0.1:9 failed" in str(alert.get_attribute("title"))
    page.click("nav >> text=Connections")
    page.fill("#q", "dport 9")
    page.press("#q", "Enter")
    page.wait_for_function("document.getElementById('total').textContent === '25'")
    screenshot(page, "story-refused")


def test_udp_to_a_closed_port_on_the_udp_page(server: Server, page: Any, stories: dict[str, Any]) -> None:
    overview(server, page)
    page.click("nav >> text=UDP flows")
    row = page.locator("#flows tbody tr", has_text=f"127.0.0.1:{UDP_PORT}").filter(has_text="python").first
    row.wait_for()
    cells = row.locator("td").all_inner_texts()
    # udp-calls (the default) records each sendto with the socket's own address: unbound,
    # 0.0.0.0 (the route picks 127.0.0.1 per datagram, below the call), and its destination
    assert cells[1].startswith("0.0.0.0:") and cells[2] == f"127.0.0.1:{UDP_PORT}"
    assert UDP_DATAGRAMS - 1 <= int(cells[4]) <= UDP_DATAGRAMS  # the socket's sends (one may precede its record)
    screenshot(page, "story-udp-closed")


def test_the_download_is_the_top_talker(server: Server, page: Any, stories: dict[str, Any]) -> None:
    overview(server, page)
    first = page.locator("#top-bytes tbody tr").first
    first.wait_for()
    assert f":{DOWNLOAD_PORT}" in first.inner_text()
    first.locator("a").click()
    page.wait_for_selector("body[data-loaded='1']")
    facts = summary(page)
    assert f"127.0.0.1:{DOWNLOAD_PORT}" in (facts["Local"], facts["Remote"])
    moved = max(
        int(facts[k].split()[0].replace(",", "")) if facts[k][0].isdigit() else 0 for k in ("Packets out", "Packets in")
    )
    assert moved > 1000
    assert stories["facts"]["downloaded"] > 100_000_000

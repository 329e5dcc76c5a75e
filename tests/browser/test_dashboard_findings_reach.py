"""Issue 34 item 2: each named finding is reachable from the Overview in two clicks, with
its cause words and numbers; from a grouped finding, its member sockets' connection pages,
which link back to the finding.

The findings are the rule engine's own (tests/browser/findings_story.py runs the rules on
the unit tests' synthetic records): K3 (why a RST came: the server's stack, NO_SOCKET),
K4 (the full listener, its queue and backlog, its namespace's counters), K8 (connects timed
out toward that listener), K10 (200 sockets of one process in CLOSE_WAIT), K11 (the UDP
socket, its sk_rcvbuf) and K14 (SYNs dropped by a firewall of this host, with the place).
A server of its own: the shared one's other alerts would compete for the Overview's ten.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from translators.records import Alert

from .conftest import ADMIN, HOST, Server, log_in, running_webapp, screenshot
from .dashboard_batch import BOOT
from .findings_story import story

pytestmark = pytest.mark.browser

# (rule, condition, port of the finding's subject): the six findings; each with words of its cause
WANTED: dict[tuple[str, str, int], tuple[str, ...]] = {
    ("K3", "peer-share", 81): ("reset 2 of 2 new connections", "the TCP stack of 10.0.0.2", "reason NO_SOCKET"),
    ("K4", "overflow", 8080): (
        "5 connections wait for accept() and its backlog is 4",
        "counted 3 ListenOverflows and 3 ListenDrops",
    ),
    ("K8", "connect-timeout", 8080): ("gave up connecting to 10.9.0.2:8080", "has a full accept queue (5 waiting"),
    ("K10", "close-wait", 8080): ("holds 200 sockets in CLOSE_WAIT", "never called close()"),
    ("K11", "rcvbuf", 5353): ("dropped 20 of the 40 datagrams", "the buffer holds 262144 bytes (sk_rcvbuf"),
    ("K14", "connect-failures", 82): (
        "2 of 2 connection attempts to 10.0.0.2:82 failed",
        "every SYN dropped on this host: NETFILTER_DROP at nft_do_chain in network namespace 11 (6)",
    ),
}


@pytest.fixture(scope="module")
def findings_server() -> Iterator[Server]:
    with running_webapp(prefix="nettrail-browser-findings-") as srv:
        yield srv


@pytest.fixture(scope="module")
def findings(findings_server: Server) -> dict[tuple[str, str, int], Alert]:
    records, alerts = story(HOST, BOOT)
    findings_server.ingest(records)
    findings_server.ingest(alerts)
    out = {}
    for a in alerts:
        key = (a.rule_id, a.condition or "", a.dport or a.sport or 0)
        if key in WANTED:
            out[key] = a
    assert sorted(out) == sorted(WANTED)
    return out


@pytest.fixture()
def viewer(findings_server: Server, browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1366, "height": 900}, bypass_csp=True)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    log_in(pg, findings_server.url, ADMIN)
    yield pg
    context.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"


def open_finding(page: Any, base: str, a: Alert) -> Any:
    """From the Overview, one click on the finding's rule: its row on the Alerts page."""
    page.goto(f"{base}/")
    row = page.locator("#latest-alerts tbody tr", has_text=a.message)
    row.wait_for()
    row.locator("a.rule").click()  # click 1
    page.wait_for_url(f"{base}/alerts/**")
    page.wait_for_selector("body[data-loaded='1']")
    target = page.locator("#alerts tbody tr.target")
    assert target.count() == 1
    assert target.is_visible()
    return target


@pytest.mark.parametrize("key", list(WANTED), ids=[f"{r}-{c}" for r, c, _ in WANTED])
def test_each_finding_shows_its_cause_one_click_from_the_overview(
    findings_server: Server, findings: dict[tuple[str, str, int], Alert], viewer: Any, key: tuple[str, str, int]
) -> None:
    a = findings[key]
    target = open_finding(viewer, findings_server.url, a)
    message = target.locator("td.msg .clamp")
    assert message.inner_text() == a.message  # whole, as the rule wrote it
    box = message.bounding_box()
    assert box is not None and box["height"] > 0
    for words in WANTED[key]:
        assert words in a.message
    assert target.locator("td").nth(2).inner_text() == a.rule_id
    screenshot(viewer, f"finding-{key[0]}-{key[1]}")


@pytest.mark.parametrize("key", [("K10", "close-wait", 8080), ("K8", "connect-timeout", 8080)], ids=["K10", "K8"])
def test_a_grouped_findings_member_socket_is_the_second_click_and_links_back(
    findings_server: Server, findings: dict[tuple[str, str, int], Alert], viewer: Any, key: tuple[str, str, int]
) -> None:
    a = findings[key]
    target = open_finding(viewer, findings_server.url, a)
    members = target.locator(".members")
    assert members.get_attribute("data-members") == str(a.members)
    links = members.locator("a.member")
    assert links.count() == len(a.member_conn_uuids) == min(a.members or 0, 50)
    first = a.member_conn_uuids[0]
    links.first.click()  # click 2
    viewer.wait_for_url(f"{findings_server.url}/connections/{first}/**")
    viewer.wait_for_selector("body[data-loaded='1']")
    row = viewer.locator("#alerts tbody tr", has_text=a.message)
    assert row.count() == 1
    back = row.locator("a.finding")
    assert back.inner_text() == f"one of {a.members} socket{'s' if (a.members or 0) > 1 else ''} in this finding"
    back.click()
    viewer.wait_for_url(f"{findings_server.url}/alerts/**")
    viewer.wait_for_selector("body[data-loaded='1']")
    assert viewer.locator("#alerts tbody tr.target td.msg .clamp").inner_text() == a.message

"""The connections search box: filtering by port keeps exactly the matching rows; a bad
expression shows the parser's message and no rows, even when an earlier response lands
after it; sorting by a column header works."""

from __future__ import annotations

import re
from typing import Any

import pytest

from .conftest import HOST, Server
from .dashboard_batch import build

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def two_more(server: Server, ingested: Any) -> list[Any]:
    batches = [build(HOST, sport=40300 + i, cookie=300 + i) for i in range(2)]
    for b in batches:
        server.ingest(b.records)
    return batches


def uuids(page: Any) -> list[str]:
    return list(page.locator("#conns tbody tr").evaluate_all("els => els.map(e => e.dataset.uuid)"))


def test_filtering_by_port_keeps_only_that_connection(server: Server, page: Any, two_more: list[Any]) -> None:
    page.goto(f"{server.url}/connections/")
    page.wait_for_selector(f'#conns tr[data-uuid="{two_more[1].uuid}"]')
    page.fill("#q", "port 40301 and comm curl and retrans > 0")
    page.press("#q", "Enter")
    page.wait_for_function("document.querySelectorAll('#conns tbody tr').length === 1")
    assert uuids(page) == [two_more[1].uuid]
    assert page.locator("#total").inner_text() == "1"
    assert "q=port+40301" in page.url


def test_a_bad_expression_shows_where_it_is_wrong(server: Server, page: Any, two_more: list[Any]) -> None:
    page.goto(f"{server.url}/connections/")
    page.fill("#q", "port abc")
    page.click("#search button[type=submit]")
    error = page.locator("#q-error")
    error.wait_for(state="visible")
    assert error.inner_text() == "port needs a whole number, got 'abc' (at character 6)"
    assert page.locator("#q").get_attribute("aria-invalid") == "true"
    assert page.locator("#conns tbody tr").count() == 0


def test_a_slow_earlier_response_cannot_overwrite_a_newer_filters_error(
    server: Server, page: Any, two_more: list[Any]
) -> None:
    """The unfiltered first load is held back until the bad expression's error is shown
    (CI once saw it land last: it hid the error and filled the table)."""
    held: list[Any] = []
    page.route(re.compile(r"/api/dash/connections\?q=&"), lambda route: held.append(route))
    page.goto(f"{server.url}/connections/")
    for _ in range(100):  # the route handler runs when Playwright next hears from the browser
        if held:
            break
        page.wait_for_timeout(50)
    assert len(held) == 1
    page.fill("#q", "port abc")
    page.click("#search button[type=submit]")
    error = page.locator("#q-error")
    error.wait_for(state="visible")
    with page.expect_response(re.compile(r"/api/dash/connections\?q=&")) as late:
        held[0].continue_()
    assert late.value.ok and late.value.finished() is None
    page.evaluate("() => new Promise((done) => setTimeout(done, 200))")  # its handler has had its turn
    assert error.is_visible() and error.inner_text() == "port needs a whole number, got 'abc' (at character 6)"
    assert page.locator("#conns tbody tr").count() == 0
    assert "q=port+abc" in page.url


def test_sorting_by_local_port_orders_the_rows(server: Server, page: Any, two_more: list[Any]) -> None:
    page.goto(f"{server.url}/connections/?q=sport+%3E%3D+40300+and+sport+%3C+40400")
    page.wait_for_function("document.querySelectorAll('#conns tbody tr').length === 2")
    page.locator('th[data-sort="local"] button').focus()
    page.keyboard.press("Enter")  # keyboard works: descending first
    page.wait_for_selector('th[data-sort="local"][aria-sort="descending"]')
    assert uuids(page) == [two_more[1].uuid, two_more[0].uuid]
    page.keyboard.press("Enter")
    page.wait_for_selector('th[data-sort="local"][aria-sort="ascending"]')
    page.wait_for_function(f"document.querySelector('#conns tbody tr').dataset.uuid === '{two_more[0].uuid}'")
    assert uuids(page) == [two_more[0].uuid, two_more[1].uuid]


def test_a_row_opens_its_connection_from_the_keyboard(server: Server, page: Any, two_more: list[Any]) -> None:
    page.goto(f"{server.url}/connections/?q=port+40300")
    row = page.locator(f'#conns tbody tr[data-uuid="{two_more[0].uuid}"]')
    row.wait_for()
    row.focus()
    page.keyboard.press("Enter")
    page.wait_for_url(f"{server.url}/connections/{two_more[0].uuid}/?host={HOST}")  # a connection is its host's
    page.wait_for_selector("body[data-loaded='1']")


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("anomaly K99", "no such rule 'K99'; did you mean 'K9'? rules: H1, H2, H3, H4, K1, K2, K3, K4, K5, K6, K7, "
         "K8, K9, K10, K11, K12, K13, K14, P1, P2, P3, P4, P5, P6, P7 (at character 9)"),
        ('comm "my app', 'unclosed quote: add the closing " (at character 6)'),
        ("retrnas > 0", "no such field 'retrnas'; did you mean 'retrans'? fields: host, comm, pid, uid, src, dst, addr, sport, "
         "dport, port, state, proto, duration, bytes, retrans, resets, anomaly (at character 1)"),
    ],
)  # fmt: skip
def test_a_filter_naming_what_does_not_exist_says_so(server: Server, page: Any, expr: str, message: str) -> None:
    page.goto(f"{server.url}/connections/")
    page.fill("#q", expr)
    page.press("#q", "Enter")
    error = page.locator("#q-error")
    error.wait_for(state="visible")
    assert error.inner_text() == message
    assert page.locator("#conns tbody tr").count() == 0


def test_an_exact_value_that_matches_nothing_suggests_contains(server: Server, page: Any, two_more: list[Any]) -> None:
    contains = page.request.get(f"{server.url}/api/dash/connections?q=comm+~+cur").json()["total"]
    assert contains >= 3  # the package's connection and two_more's, all owned by curl
    page.goto(f"{server.url}/connections/")
    page.fill("#q", "comm cur and sport >= 40300")
    page.press("#q", "Enter")
    hint = page.locator("#q-hint")
    hint.wait_for(state="visible")
    assert hint.inner_text() == f"no connection has comm exactly 'cur'; comm ~ cur (contains) matches {contains:,}"
    assert page.locator("#total").inner_text() == "0"
    page.fill("#q", "comm ~ cur and dst 127.0.0.0/8 and sport >= 40300 and sport < 40302")
    page.press("#q", "Enter")
    page.wait_for_function("document.querySelectorAll('#conns tbody tr').length === 2")
    assert sorted(uuids(page)) == sorted(b.uuid for b in two_more)
    assert page.locator("#q-hint").is_hidden()


def test_nettrails_own_connections_are_hidden_until_the_toggle_shows_them(server: Server, page: Any) -> None:
    """A connection of the collector's own process (the pid of its collector_status) is
    left out of the table; the toggle brings it back (issue 18 item 2)."""
    import time

    import msgspec

    from translators.records import CollectorStatus

    from .dashboard_batch import BOOT, _seq

    collector_pid = 39_999
    batch = build(HOST, sport=40900, cookie=900)
    own = [
        msgspec.structs.replace(r, pid=collector_pid, tgid=collector_pid, comm="nettrail")
        if getattr(r, "pid", None) == batch.pid
        else r
        for r in batch.records
    ]
    status = CollectorStatus(
        host_id=HOST, boot_id=BOOT, seq=next(_seq), ts_ns=1, ts_wall=time.time() - 86_400,  # an old run: not the newest status
        provider="nettrail", probe="status", providers=["tcp"], attached={}, pid=collector_pid, comm="nettrail",
    )  # fmt: skip
    server.ingest([*own, status])
    page.goto(f"{server.url}/connections/?q=sport+40900")
    page.wait_for_function("document.getElementById('total').textContent === '0'")
    assert page.locator("#own").is_checked() is False
    page.check("#own")
    page.wait_for_selector(f'#conns tr[data-uuid="{batch.uuid}"]')
    assert page.locator("#total").inner_text() == "1"
    assert "own=1" in page.url

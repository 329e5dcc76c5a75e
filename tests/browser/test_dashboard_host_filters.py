"""Every page's host filter filters (issue 18 item 5: `/alerts/?host=` selected the host
but listed every host's alerts). Two hosts send the same kind of records; each page
opened with ?host=H lists H's rows only, and without it both hosts'.
Pages: Buffers (recent drops), UDP flows, Alerts, Status (one panel per host), Connections
(the filter language's `host`)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from translators.records import CollectorStatus

from .conftest import HOST, Server
from .dashboard_batch import BOOT, _seq, build

pytestmark = pytest.mark.browser
OTHER = "filter-host"


@pytest.fixture(scope="module")
def two_hosts(server: Server, ingested: Any) -> Any:
    other = Server(server.url, server.make_token(OTHER), server.data_dir)  # as the server's user
    batch = build(OTHER, sport=40970, cookie=970)
    status = CollectorStatus(
        host_id=OTHER, boot_id=BOOT, seq=next(_seq), ts_ns=1, ts_wall=time.time(), provider="nettrail", probe="status",
        providers=["tcp", "siftr", "skb", "udp"], attached={},
    )  # fmt: skip
    assert other.ingest([status, *batch.records])["stored"] == len(batch.records) + 1
    return batch


def hosts_in(page: Any, selector: str, column: int) -> set[str]:
    cells = page.locator(selector).evaluate_all(
        f"rs => rs.map(r => r.cells[{column}] && r.cells[{column}].textContent)"
    )
    return {c for c in cells if c}


@pytest.mark.parametrize(
    ("path", "rows", "column"),
    [
        ("/buffers/", "#recent tbody tr", 1),
        ("/udp/", "#flows tbody tr", 0),
        ("/alerts/", "#alerts tbody tr", 3),
    ],
)
def test_a_pages_host_filter_lists_that_hosts_rows_only(
    server: Server, page: Any, two_hosts: Any, path: str, rows: str, column: int
) -> None:
    page.goto(f"{server.url}{path}")
    page.wait_for_function(f"document.querySelectorAll('{rows}').length > 0")
    page.wait_for_timeout(300)
    assert {HOST, OTHER} <= hosts_in(page, rows, column)
    for host in (HOST, OTHER):
        page.goto(f"{server.url}{path}?host={host}")
        page.wait_for_function(f"document.querySelectorAll('{rows}').length > 0")
        page.wait_for_timeout(300)
        assert hosts_in(page, rows, column) == {host}, (path, host)
        assert page.locator("#host").input_value() == host


def test_the_status_and_connections_pages_filter_by_host(server: Server, page: Any, two_hosts: Any) -> None:
    page.goto(f"{server.url}/status/?host={OTHER}")
    page.wait_for_selector(f"section.host-status[data-host='{OTHER}']")
    assert page.locator("section.host-status").evaluate_all("ss => ss.map(s => s.dataset.host)") == [OTHER]
    page.goto(f"{server.url}/connections/?q=host+{OTHER}")
    page.wait_for_function("document.getElementById('total').textContent === '1'")
    assert page.locator("#conns tbody tr").get_attribute("data-uuid") == two_hosts.uuid

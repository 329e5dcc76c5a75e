"""The counters page in Chromium: per-flow IP counters sorted by the clicked heading (and
back), the host filter, the stack counters chart, their sums over a host's network
namespaces and each namespace's latest values (named, or by the process read in it), and a new flow report
arriving over the live feed without a reload. Records: tests/counters_cast.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.counters_cast import BLUE, NETNS, later_report_of_b, records

from .conftest import HOST, PAINTED, Server, screenshot

pytestmark = pytest.mark.browser
A, B = "10.1.0.1:443", "10.1.0.2:5353"  # the sources of flows a (TCP, more bytes) and b (UDP, more packets)


@pytest.fixture(scope="module")
def counters(server: Server) -> None:
    batch = records(HOST)
    assert server.ingest(batch) == {"stored": len(batch), "duplicates": 0, "tracing": None}


def flow_rows(page: Any) -> list[list[str]]:
    rows = page.locator("#ip-flows tbody tr")
    return [rows.nth(i).locator("td").all_inner_texts() for i in range(rows.count())]


def sort_by(page: Any, heading: str) -> None:
    page.locator(f"#ip-flows th[data-sort='{heading}'] button").click()
    page.wait_for_selector("body[data-loaded='1']")


def test_flows_sort_by_bytes_then_packets_in_both_directions(server: Server, page: Any, counters: None) -> None:
    page.goto(f"{server.url}/counters/")
    page.wait_for_selector("body[data-loaded='1']")
    rows = flow_rows(page)
    assert [r[3] for r in rows] == [A, B]  # bytes, descending
    assert rows[0] == [HOST, "send", "TCP", A, "10.1.0.2:50000", "2", "28", "41.0 kB", rows[0][8], rows[0][9]]
    assert page.locator("#ip-flows th[data-sort='bytes']").get_attribute("aria-sort") == "descending"
    sort_by(page, "packets")
    assert [r[3] for r in flow_rows(page)] == [B, A]
    assert page.url.endswith("/counters/?sort=-packets")
    page.locator("#ip-flows th[data-sort='packets'] button").focus()
    page.keyboard.press("Enter")  # headings are buttons: the keyboard sorts too
    page.wait_for_selector("#ip-flows th[data-sort='packets'][aria-sort='ascending']")
    assert [r[3] for r in flow_rows(page)] == [A, B]
    page.select_option("#host", HOST)
    page.click("#select button[type=submit]")
    page.wait_for_selector("body[data-loaded='1']")
    assert page.url.endswith(f"/counters/?host={HOST}&sort=packets")
    assert [r[0] for r in flow_rows(page)] == [HOST, HOST]


def cells(page: Any, table: str) -> list[list[str]]:
    return page.locator(f"#{table} tbody tr").evaluate_all("rs => rs.map(r => [...r.cells].map(c => c.textContent))")


def test_the_stack_counters_chart_and_tables_show_each_namespace_and_their_sum(
    server: Server, page: Any, counters: None
) -> None:
    page.goto(f"{server.url}/counters/?host={HOST}")
    page.wait_for_selector("body[data-loaded='1']")
    assert page.evaluate(PAINTED, ["chart-stack", "#0b5cad"]) > 20  # ListenOverflows' line, both namespaces
    assert page.evaluate(PAINTED, ["chart-stack", "#1f7a3a"]) > 20  # OutRsts' line
    caption = page.locator("#stack-h + .legend-note").inner_text()
    assert caption.startswith(
        "Increase of each TCP/IP MIB counter per time bucket, every network namespace of a host summed."
    )
    summed = {row[2]: (row[1], row[3], row[4], row[5]) for row in cells(page, "stack-sum")}
    assert summed == {
        "ListenOverflows": ("TcpExt", "21", "2", "3"),  # 12 in the init namespace + 9 in blue
        "ListenDrops": ("TcpExt", "9", "1", "1"),
        "OutRsts": ("Tcp", "3", "1", "1"),
    }
    per_ns = {(row[1], row[3]): (row[2], row[4], row[5], row[6]) for row in cells(page, "stack")}
    assert per_ns == {
        (f"{NETNS} systemd (pid 1)", "ListenOverflows"): ("TcpExt", "12", "12", "2"),
        (f"{NETNS} systemd (pid 1)", "OutRsts"): ("Tcp", "100", "3", "1"),
        (f"{BLUE} blue", "ListenDrops"): ("TcpExt", "9", "9", "1"),
        (f"{BLUE} blue", "ListenOverflows"): ("TcpExt", "9", "9", "1"),
    }
    screenshot(page, "counters")


def test_a_new_flow_report_updates_the_table_without_a_reload(server: Server, page: Any, counters: None) -> None:
    page.goto(f"{server.url}/counters/?sort=-packets")
    page.wait_for_selector("body[data-loaded='1']")
    page.wait_for_function(
        f"(document.body.dataset.liveGroups || '').split(' ').includes('host.{HOST}')", timeout=30_000
    )
    page.evaluate("window.notReloaded = true")
    server.ingest([later_report_of_b(HOST, 50, 5000)])
    page.wait_for_function(
        "document.querySelector('#ip-flows tbody tr td:nth-child(7)').textContent === '150'", timeout=30_000
    )
    assert flow_rows(page)[0][3] == B and flow_rows(page)[0][7] == "14.0 kB"
    assert page.evaluate("window.notReloaded") is True

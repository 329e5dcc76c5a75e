"""The counters page in Chromium: per-flow IP counters sorted by the clicked heading (and
back), the host filter, the stack counters chart and latest values, and a new flow report
arriving over the live feed without a reload. Records: tests/counters_cast.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.counters_cast import later_report_of_b, records

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


def test_the_stack_counters_chart_and_table_show_each_counter(server: Server, page: Any, counters: None) -> None:
    page.goto(f"{server.url}/counters/?host={HOST}")
    page.wait_for_selector("body[data-loaded='1']")
    assert page.evaluate(PAINTED, ["chart-stack", "#0b5cad"]) > 20  # ListenOverflows' line
    assert page.evaluate(PAINTED, ["chart-stack", "#b3261e"]) > 20  # OutRsts' line
    table = {
        tr[3]: tr
        for tr in page.locator("#stack tbody tr").evaluate_all(
            "rs => rs.map(r => [...r.cells].map(c => c.textContent))"
        )
    }
    assert {name: (row[2], row[4], row[5], row[6]) for name, row in table.items()} == {
        "ListenOverflows": ("TcpExt", "12", "12", "2"),
        "OutRsts": ("Tcp", "100", "3", "1"),
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

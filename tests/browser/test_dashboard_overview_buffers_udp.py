"""Overview counters and top talkers, the buffers page (drop breakdowns, a drop's buffer
lifecycle and connection), and the UDP flows page, after a recorded batch is ingested."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import HOST, PAINTED, Server, screenshot
from .dashboard_batch import DROP_REASON, RETRANSMITTED, build

pytestmark = pytest.mark.browser


def test_the_overview_shows_host_counters_alerts_and_top_talkers(server: Server, page: Any, ingested: Any) -> None:
    server.ingest(build(HOST, sport=40600, cookie=600).records)  # fresh records inside the 10 s rate window
    page.goto(f"{server.url}/")
    host = page.locator(f'#hosts tbody tr[data-host="{HOST}"]')
    host.wait_for()
    assert float(host.locator('[data-counter="records"]').inner_text()) > 0
    assert page.locator("#latest-alerts tbody tr", has_text="K1").count() >= 1
    top = page.locator("#top-retrans tbody tr", has_text=f":{ingested.sport}")
    assert top.locator("td.num").inner_text() == str(len(RETRANSMITTED))
    # build() makes equal byte counts, and the browser tests share one database: among equal
    # bytes the newest connection comes first, so the one just ingested is in the top ten
    assert page.locator("#top-bytes tbody tr", has_text=":40600").count() == 1
    screenshot(page, "overview")


def test_the_open_connections_counter_follows_the_live_feed(server: Server, page: Any, ingested: Any) -> None:
    page.goto(f"{server.url}/")
    page.wait_for_function(
        f"(document.body.dataset.liveGroups || '').split(' ').includes('host.{HOST}')", timeout=30_000
    )
    cell = page.locator(f'#hosts tbody tr[data-host="{HOST}"] [data-counter="open"]')
    cell.wait_for()
    before = int(cell.inner_text().replace(",", ""))
    batch = build(HOST, sport=40500, cookie=500)
    server.ingest([r for r in batch.records if r.kind == "tcp_state" and r.state in ("SYN_SENT", "ESTABLISHED")])
    page.wait_for_function(
        f"""Number(document.querySelector('#hosts tr[data-host="{HOST}"] [data-counter="open"]').textContent) === {before + 1}""",
        timeout=30_000,
    )
    server.ingest([r for r in batch.records if not (r.kind == "tcp_state" and r.state in ("SYN_SENT", "ESTABLISHED"))])
    page.wait_for_function(
        f"""Number(document.querySelector('#hosts tr[data-host="{HOST}"] [data-counter="open"]').textContent) === {before}""",
        timeout=30_000,
    )


def test_clicking_a_drop_shows_its_buffer_lifecycle_and_connection(server: Server, page: Any, ingested: Any) -> None:
    page.goto(f"{server.url}/buffers/?reason={DROP_REASON}")
    page.wait_for_selector("body[data-loaded='1']")
    assert page.locator("#by-location tbody tr", has_text="nf_hook_slow+0x9c").count() == 1
    assert page.locator("#by-process tbody tr", has_text="curl").count() == 1
    assert page.evaluate(PAINTED, ["chart-drops", "#0b5cad"]) > 100  # the stacked bars are drawn
    drop = page.locator(f'#recent tbody tr[data-skb="{ingested.cookie * 1000 + 9}"]')
    drop.focus()
    page.keyboard.press("Enter")
    panel = page.locator("#skb-panel")
    panel.wait_for(state="visible")
    stages = panel.locator("tbody tr td:nth-child(2)").all_inner_texts()
    assert stages == ["tx-first", "queue", f"drop: {DROP_REASON}"]
    assert panel.locator(f'a[href="/connections/{ingested.uuid}/?host={HOST}"]').count() == 1
    assert page.locator("#lifecycles tbody tr").count() >= 1
    screenshot(page, "buffers")
    page.goto(f"{server.url}/buffers/?conn={ingested.uuid}")
    page.wait_for_selector("body[data-loaded='1']")
    ends = page.locator("#lifecycles tbody tr td:nth-child(5)").all_inner_texts()
    assert sorted(ends) == ["consumed", "consumed", "consumed", "dropped"]  # the flow's four buffers


def test_clicking_a_drop_without_a_buffer_identity_opens_its_connection(server: Server, page: Any) -> None:
    """A sampled drop event carries no skb_uid: its row opens the connection instead of
    doing nothing (issue 18 item 3)."""
    import msgspec

    from translators.records import SkbDrop

    from .dashboard_batch import _seq

    batch = build(HOST, sport=40950, cookie=950)
    drop = next(r for r in batch.records if isinstance(r, SkbDrop))
    server.ingest(
        [*batch.records, msgspec.structs.replace(drop, seq=next(_seq), skb_uid=None, drop_location="anon+0x1")]
    )
    page.goto(f"{server.url}/buffers/")
    row = page.locator("#recent tbody tr", has_text="anon+0x1")
    row.wait_for()
    row.locator("td").first.click()
    page.wait_for_url(f"{server.url}/connections/{batch.uuid}/?host={HOST}")


def test_the_udp_page_lists_the_flow_with_its_datagrams(server: Server, page: Any, ingested: Any) -> None:
    page.goto(f"{server.url}/udp/")
    page.wait_for_selector("body[data-loaded='1']")
    row = page.locator("#flows tbody tr", has_text=f"127.0.0.1:{15353 + ingested.cookie}")
    assert row.count() == 1
    cells = row.locator("td").all_inner_texts()
    assert cells[3] == "curl" and cells[4] == "5" and cells[5] == "500 B"
    screenshot(page, "udp")


def test_the_overview_counts_time_wait_per_destination_and_links_its_filter(server: Server, page: Any) -> None:
    """The TIME_WAIT pile-up story (issue 18 item 3): three sockets that entered TIME_WAIT
    toward 10.77.0.9:7950 are one Overview row counting 3, whose link lists those three."""
    import time

    from translators.records import TcpStateChange, connection_uuid

    from .dashboard_batch import BOOT, _seq

    now = time.time() - 2.0
    for cookie in (7950_01, 7950_02, 7950_03):
        flow = {
            "host_id": HOST, "boot_id": BOOT, "provider": "tcp", "probe": "state-change", "ip_ver": 4,
            "conn_uuid": connection_uuid(HOST, BOOT, cookie), "src": "127.0.0.1", "sport": cookie % 100 + 41000,
            "dst": "10.77.0.9", "dport": 7950, "comm": "shortconn", "pid": 5150, "tgid": 5150,
        }  # fmt: skip
        states = (("CLOSED", "SYN_SENT"), ("SYN_SENT", "ESTABLISHED"), ("ESTABLISHED", "FIN_WAIT_1"),
                  ("FIN_WAIT_1", "FIN_WAIT_2"), ("FIN_WAIT_2", "TIME_WAIT"), ("TIME_WAIT", "CLOSED"))  # fmt: skip
        server.ingest(
            [
                TcpStateChange(
                    **flow,
                    seq=next(_seq),
                    ts_ns=int((now + i * 1e-3) * 1e9),
                    ts_wall=now + i * 1e-3,
                    prev_state=prev,
                    state=new,
                    inferred=new == "CLOSED",
                )  # fmt: skip
                for i, (prev, new) in enumerate(states)
            ]
        )
    page.goto(f"{server.url}/")
    row = page.locator(f'#time-wait tbody tr[data-host="{HOST}"][data-dst="10.77.0.9:7950"]')
    row.wait_for()
    assert row.locator("td.num").inner_text() == "3"
    screenshot(page, "overview-time-wait")
    row.locator("a").click()
    page.wait_for_url("**/connections/?q=*")
    page.wait_for_function("document.querySelector('#total').textContent === '3'")
    assert page.locator("#q").input_value() == f"host {HOST} and state TIME_WAIT and dst 10.77.0.9 and dport 7950"
    assert page.locator("#conns tbody tr").count() == 3

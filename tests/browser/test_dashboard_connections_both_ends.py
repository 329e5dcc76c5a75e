"""The Connections page shows a connection traced at both ends once (issue 19 item 6):
one host's two sockets of 127.0.0.1:40950 <-> 127.0.0.1:8950 are one row, the opener's,
whose "both ends" badge opens the other end's page; the page line says a row was folded.
The pairing itself is tested in tests/test_stitched_view.py; this checks what the page draws."""

from __future__ import annotations

import time
from typing import Any

import pytest

from translators.records import TcpStateChange, connection_uuid

from .conftest import HOST, Server
from .dashboard_batch import BOOT, _seq

pytestmark = pytest.mark.browser

CLIENT = {"src": "127.0.0.1", "sport": 40950, "dst": "127.0.0.1", "dport": 8950, "ip_ver": 4}
SERVER = {"src": "127.0.0.1", "sport": 8950, "dst": "127.0.0.1", "dport": 40950, "ip_ver": 4}


def end(cookie: int, flow: dict[str, Any], t: float, changes: list[tuple[str, str, bool | None]]) -> list[Any]:
    uuid = connection_uuid(HOST, BOOT, cookie)
    return [
        TcpStateChange(
            host_id=HOST,
            boot_id=BOOT,
            seq=next(_seq),
            ts_ns=1_000_000_000 + i,
            ts_wall=t + i * 0.001,
            provider="tcp",
            probe="state-change",
            conn_uuid=uuid,
            sock_cookie=cookie,
            **flow,
            prev_state=prev,
            state=state,
            active=active,
        )  # fmt: skip
        for i, (prev, state, active) in enumerate(changes)
    ]


def test_both_ends_are_one_row_whose_badge_opens_the_other_end(server: Server, page: Any) -> None:
    t = time.time() - 5.0
    opener = end(950, CLIENT, t, [("CLOSED", "SYN_SENT", True), ("SYN_SENT", "ESTABLISHED", True)])
    other = end(951, SERVER, t + 0.0005, [("LISTEN", "SYN_RECEIVED", False), ("SYN_RECEIVED", "ESTABLISHED", False)])
    server.ingest(other + opener)
    a, b = connection_uuid(HOST, BOOT, 950), connection_uuid(HOST, BOOT, 951)

    page.goto(f"{server.url}/connections/?q=port+8950")
    page.wait_for_selector(f'#conns tr[data-uuid="{a}"]')
    rows = page.locator("#conns tbody tr").evaluate_all("els => els.map(e => [e.dataset.uuid, e.dataset.peer])")
    assert rows == [[a, b]]
    assert page.locator("#total").inner_text() == "2"  # both rows match the filter
    assert ", 1 folded into their other end's row (both ends traced)," in page.locator("#page-info").inner_text()
    badge = page.locator(f'#conns tr[data-uuid="{a}"] td[data-col="remote"] a.both-ends')
    assert (badge.inner_text(), badge.get_attribute("href")) == ("both ends", f"/connections/{b}/?host={HOST}")
    badge.click()
    page.wait_for_url(f"**/connections/{b}/?host={HOST}")
    page.wait_for_selector("#stitched")  # the other end's page shows both halves

"""Drops on their connection (issue 34 item 5), in the browser: segments of a connection
dropped as PKT_TOO_BIG at a forwarding hop on the host (no socket: matched by 4-tuple) are
listed on the connection's page, and on the Buffers page with their packet and a link to
the connection; the UDP page's address/port filter keeps the flows of that port."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from translators.records import Record, SkbDrop, TcpStateChange, UdpDatagram, connection_uuid

from .conftest import HOST, Server, screenshot

pytestmark = pytest.mark.browser

BOOT, COOKIE = "boot-fwd", 9_034
CLIENT, SERVER = ("10.77.41.1", 47_770), ("10.77.42.2", 8_034)
_seq = itertools.count(7_000_000)


def env(t: float, **kw: Any) -> dict[str, Any]:
    seq = next(_seq)
    return {"host_id": HOST, "boot_id": BOOT, "seq": seq, "ts_ns": int(t * 1e9), "ts_wall": t, **kw}


def pmtu_black_hole(t0: float) -> list[Record]:
    """A connection from CLIENT to SERVER, three of its full-size segments dropped at the router."""
    ends = {"ip_ver": 4, "src": CLIENT[0], "sport": CLIENT[1], "dst": SERVER[0], "dport": SERVER[1]}
    conn = {"provider": "tcp", "probe": "state-change", "conn_uuid": connection_uuid(HOST, BOOT, COOKIE), **ends}
    out: list[Record] = [
        TcpStateChange(**env(t0, **conn), prev_state="CLOSED", state="SYN_SENT", ctx="task", comm="curl", pid=77),
        TcpStateChange(**env(t0 + 0.01, **conn), prev_state="SYN_SENT", state="ESTABLISHED", ctx="softirq"),
    ]
    out += [
        SkbDrop(
            **env(t0 + 0.2 * (i + 1), provider="skb", probe="m-free", **ends),
            ctx="softirq",
            l4_proto="tcp",
            protocol=0x0800,
            len=1_500,
            if_name="r1",
            drop_reason=93,
            drop_reason_str="PKT_TOO_BIG",
            drop_location="ip_forward+0x2c0",
        )  # fmt: skip
        for i in range(3)
    ]
    return out


def datagrams(t0: float) -> list[Record]:
    def one(i: int, sport: int, dport: int, comm: str) -> UdpDatagram:
        return UdpDatagram(
            **env(t0 + i * 0.01, provider="udp", probe="send", hook="tp_btf/sock_send_length"), src="10.0.9.1",
            sport=sport, dst="10.0.9.2", dport=dport, comm=comm, bytes=40,
        )  # fmt: skip

    return [one(0, 5_301, 53, "resolver"), one(1, 5_302, 53, "resolver"), one(2, 6_000, 123, "ntpd")]


def test_a_forwarded_drop_is_on_its_connections_page_and_linked_from_buffers(server: Server, page: Any) -> None:
    server.ingest(pmtu_black_hole(time.time() - 5))
    uuid = connection_uuid(HOST, BOOT, COOKIE)
    page.goto(f"{server.url}/connections/{uuid}/")
    page.wait_for_selector("body[data-loaded='1']", timeout=10000)
    rows = page.locator("#drops tbody tr")
    assert rows.count() == 3
    cells = rows.first.locator("td").all_inner_texts()
    assert cells[1:4] == ["PKT_TOO_BIG", "outgoing packet, no socket (at r1)", "ip_forward+0x2c0"]
    assert page.locator("#drops-empty").is_hidden()
    screenshot(page, "connection-forwarded-drops")
    page.goto(f"{server.url}/buffers/?conn={uuid}")
    page.wait_for_selector("body[data-loaded='1']", timeout=10000)
    recent = page.locator("#recent tbody tr", has_text="PKT_TOO_BIG")
    assert recent.count() == 3
    assert "tcp 10.77.41.1:47770 → 10.77.42.2:8034" in recent.first.inner_text()
    recent.first.locator("a").click()
    page.wait_for_url(f"**/connections/{uuid}/**")


def test_the_udp_page_filters_by_port_at_either_end(server: Server, page: Any) -> None:
    server.ingest(datagrams(time.time() - 3))
    page.goto(f"{server.url}/udp/?host={HOST}&port=53")
    page.wait_for_selector("body[data-loaded='1']", timeout=10000)
    assert page.locator("#port").input_value() == "53"
    texts = page.locator("#flows tbody tr").all_inner_texts()
    assert len(texts) == 2 and all(":53" in t and "resolver" in t for t in texts)
    page.fill("#port", "123")
    page.click("#select button[type=submit]")
    page.wait_for_function("() => document.querySelectorAll('#flows tbody tr').length === 1")
    assert "ntpd" in page.locator("#flows tbody tr").inner_text()
    assert page.url.endswith("port=123")

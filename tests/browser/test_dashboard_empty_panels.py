"""Empty panels say why (issue 18 item 3): on a host whose collector runs tcp and siftr
only, a connection's skb-lifecycle, tcpdebug and drops panels name the missing provider
and the command that enables it; the Buffers page's empty drop chart says the same per
host, and the UDP page names the provider that is off. A host of its own (its newest
collector_status decides)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from translators.records import CollectorStatus, SkbDrop, SkbEvent, TcpDebugSnapshot, UdpDatagram

from .conftest import Server, screenshot
from .dashboard_batch import BOOT, _seq, build

pytestmark = pytest.mark.browser
HOST = "panels-host"


@pytest.fixture(scope="module")
def conn(server: Server) -> Any:
    # a token made as the server's user (daphne_server.Server.make_token)
    host = Server(server.url, server.make_token(HOST), server.data_dir)
    batch = build(HOST, sport=40860, cookie=860)
    # none of the providers it does not run (tcp and siftr only)
    kept = [r for r in batch.records if not isinstance(r, SkbEvent | SkbDrop | TcpDebugSnapshot | UdpDatagram)]
    status = CollectorStatus(
        host_id=HOST, boot_id=BOOT, seq=next(_seq), ts_ns=1, ts_wall=time.time(), provider="nettrail", probe="status",
        providers=["tcp", "siftr"], attached={},
    )  # fmt: skip
    assert host.ingest([status, *kept])["stored"] == len(kept) + 1
    return batch


def test_a_connections_empty_panels_name_the_provider_and_how_to_enable_it(
    server: Server, page: Any, conn: Any
) -> None:
    page.goto(f"{server.url}/connections/{conn.uuid}/?host={HOST}")
    page.wait_for_function("document.body.dataset.loaded === '1'")
    expect = {
        "skbs": "No skb lifecycles: the collector on panels-host runs tcp, siftr, not skb-lifecycle. "
        "Enable it: nettrail collect --providers tcp,siftr,skb-lifecycle (nettrail up: NETTRAIL_PROVIDERS=tcp,siftr,skb-lifecycle), or on the dashboard: "
        "Status, What it traces (staff; followed by a collector run with --providers-from-server, as nettrail up's is).",
        "tcpdebug": "No tcpdebug snapshots: the collector on panels-host runs tcp, siftr, not tcpdebug. "
        "Enable it: nettrail collect --providers tcp,siftr,tcpdebug (nettrail up: NETTRAIL_PROVIDERS=tcp,siftr,tcpdebug), or on the dashboard: "
        "Status, What it traces (staff; followed by a collector run with --providers-from-server, as nettrail up's is).",
        "drops": "No drops: the collector on panels-host runs tcp, siftr, not skb. "
        "Enable it: nettrail collect --providers tcp,siftr,skb (nettrail up: NETTRAIL_PROVIDERS=tcp,siftr,skb), or on the dashboard: "
        "Status, What it traces (staff; followed by a collector run with --providers-from-server, as nettrail up's is).",
    }
    for panel, text in expect.items():
        shown = page.locator(f"#{panel}-empty")
        assert shown.is_visible(), panel
        assert shown.inner_text() == text
    assert page.locator("#siftr-empty").is_hidden()  # siftr runs and recorded samples
    screenshot(page, "empty-panels")


def test_the_buffers_page_says_why_a_host_has_no_drops(server: Server, page: Any, conn: Any) -> None:
    page.goto(f"{server.url}/buffers/?host={HOST}")
    page.wait_for_function("document.body.dataset.loaded === '1'")
    assert page.locator("#drops-empty").inner_text() == (
        "No drops recorded. No drops: the collector on panels-host runs tcp, siftr, not skb. "
        "Enable it: nettrail collect --providers tcp,siftr,skb (nettrail up: NETTRAIL_PROVIDERS=tcp,siftr,skb), or on the dashboard: "
        "Status, What it traces (staff; followed by a collector run with --providers-from-server, as nettrail up's is)."
    )


def test_the_counters_page_says_which_provider_its_empty_ip_flows_need(server: Server, page: Any, conn: Any) -> None:
    page.goto(f"{server.url}/counters/?host={HOST}")
    row = page.locator("#ip-flows tbody tr.empty-why")
    row.wait_for()
    assert row.all_inner_texts() == [
        "No IP flow counters: the collector on panels-host runs tcp, siftr, not ip-flows. "
        "Enable it: nettrail collect --providers tcp,siftr,ip-flows (nettrail up: NETTRAIL_PROVIDERS=tcp,siftr,ip-flows), "
        "or on the dashboard: Status, What it traces (staff; followed by a collector run with --providers-from-server, "
        "as nettrail up's is)."
    ]


def test_the_udp_page_says_the_provider_is_off_and_how_to_enable_it(server: Server, page: Any, conn: Any) -> None:
    page.goto(f"{server.url}/udp/?host={HOST}")
    page.wait_for_function("document.body.dataset.loaded === '1'")
    assert page.locator("#udp-empty").inner_text() == (
        "No UDP datagrams recorded. The udp provider is not enabled on panels-host (runs tcp, siftr): add udp-calls "
        "(its always-on mode: every send and receive call, with its peer) or udp (also every packet at the device, "
        "costly) to the collector's --providers (nettrail collect --providers tcp,udp-calls,…; nettrail up: "
        "NETTRAIL_PROVIDERS=tcp,udp-calls,…), or on the dashboard: Status, What it traces (staff; followed by a collector run with --providers-from-server, "
        "as nettrail up's is), to record UDP datagrams."
    )


def test_the_udp_page_says_what_a_hosts_udp_provider_cannot_give(server: Server, page: Any) -> None:
    """A host whose collector runs udp-calls without a cgroup v2 hierarchy: its unconnected
    sockets' calls have no destination, and the page says why above the table."""
    host = "udp-degraded-host"
    other = Server(server.url, server.make_token(host), server.data_dir)
    why = "no cgroup v2 hierarchy is mounted"
    status = CollectorStatus(
        host_id=host, boot_id=BOOT, seq=next(_seq), ts_ns=1, ts_wall=time.time(), provider="nettrail", probe="status",
        providers=["tcp", "udp-calls"], attached={}, degraded={"udp-calls": {"dst/dport of unconnected sockets' calls": why}},
    )  # fmt: skip
    assert other.ingest([status])["stored"] == 1
    page.goto(f"{server.url}/udp/?host={host}")
    page.wait_for_function("document.body.dataset.loaded === '1'")
    assert page.locator("#udp-degraded li").inner_text() == (
        f"{host}: udp-calls dst/dport of unconnected sockets' calls: {why}"
    )
    page.goto(f"{server.url}/udp/?host={HOST}")  # runs tcp and siftr: nothing to say of udp
    page.wait_for_function("document.body.dataset.loaded === '1'")
    assert page.locator("#udp-degraded").count() == 0

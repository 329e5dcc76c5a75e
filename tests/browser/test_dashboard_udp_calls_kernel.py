"""The UDP page from the within-budget set (`tcp,skb,udp-calls`, nettrail up's
NETTRAIL_PROVIDERS suggestion), on real traffic: a collector (eBPF, root) traces a network
namespace of the test's own and ships to the webapp; datagrams to a closed port and an
exchange with a server are on the UDP page with both ends' addresses and processes,
each datagram once, a row per socket."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import pytest
import requests

from tests.alert_kernel_support import namespace
from tests.veth_lab import in_netns

from .conftest import Server, screenshot
from .kernel_env import WARMUP_S, collecting, need_root_and_btf

pytestmark = [pytest.mark.browser, pytest.mark.kernel, pytest.mark.slow]
HOST = "udp-calls-host"
CLOSED, OPEN = 7311, 7312
TO_CLOSED, EXCHANGED = 9, 6


def flows(server: Server, cookies: dict[str, str]) -> list[dict[str, Any]]:
    url = f"{server.url}/api/dash/udp"
    return list(requests.get(url, params={"host": HOST}, cookies=cookies, timeout=10).json()["flows"])


def test_the_udp_page_names_both_ends_of_each_flow_from_the_calls(
    server: Server, page: Any, admin_state: dict[str, Any], tmp_path: Any
) -> None:
    need_root_and_btf("to load eBPF programs and make a network namespace")
    cookies = {c["name"]: c["value"] for c in admin_state["cookies"]}
    with namespace(f"ntudp{os.getpid() % 100000}") as (name, inode):
        options = ("--providers", "tcp,skb,udp-calls", "--filter", f"netns={inode}", "--no-stack-counters")
        with collecting(server, tmp_path, *options, host=HOST) as col:
            col.wait_tracing()
            srv = in_netns(name, lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
            srv.bind(("127.0.0.1", OPEN))
            cli = in_netns(name, lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
            for i in range(TO_CLOSED):
                cli.sendto(b"knock" * (i + 1), ("127.0.0.1", CLOSED))  # nobody: dropped, NO_SOCKET
            for _ in range(EXCHANGED):
                cli.sendto(b"q" * 10, ("127.0.0.1", OPEN))
                data, peer = srv.recvfrom(100)
                srv.sendto(data.upper(), peer)
                assert cli.recvfrom(100)[0] == b"Q" * 10
            sport = cli.getsockname()[1]
            cli.close()
            srv.close()
            deadline = time.monotonic() + WARMUP_S
            want = 5  # client -> closed; client -> server and back, each by its sender and its reader
            while len([f for f in flows(server, cookies) if sport in (f["sport"], f["dport"])]) < want:
                assert col.proc.poll() is None, col.log()
                assert time.monotonic() < deadline, (flows(server, cookies), col.log())
                time.sleep(0.5)
    got = sorted(
        (f"{f['src']}:{f['sport']}", f"{f['dst']}:{f['dport']}", f["comm"], f["datagrams"], f["bytes"])
        for f in flows(server, cookies)
        if sport in (f["sport"], f["dport"])
    )
    knocked = sum(5 * (i + 1) for i in range(TO_CLOSED))
    # a row per socket (the rows of one flow's sender and reader stay apart, each naming
    # the ends as its socket does: the unbound client's local address is 0.0.0.0, nothing
    # on a call names the source the route chose), each datagram once
    client = f"127.0.0.1:{sport}"
    assert got == sorted(
        [
            (f"0.0.0.0:{sport}", f"127.0.0.1:{CLOSED}", "python", TO_CLOSED, knocked),
            (f"0.0.0.0:{sport}", f"127.0.0.1:{OPEN}", "python", EXCHANGED, 10 * EXCHANGED),  # the client's sends
            (client, f"127.0.0.1:{OPEN}", "python", EXCHANGED, 10 * EXCHANGED),  # the server's reads, turned round
            (f"127.0.0.1:{OPEN}", client, "python", EXCHANGED, 10 * EXCHANGED),  # the server's answers
            (f"127.0.0.1:{OPEN}", f"0.0.0.0:{sport}", "python", EXCHANGED, 10 * EXCHANGED),  # the client's reads
        ]
    ), got
    page.goto(f"{server.url}/udp/?host={HOST}")
    page.wait_for_selector("body[data-loaded='1']")
    row = page.locator("#flows tbody tr", has_text=f"127.0.0.1:{CLOSED}").first
    cells = row.locator("td").all_inner_texts()
    assert (cells[1], cells[2], cells[3], cells[4]) == (
        f"0.0.0.0:{sport}",
        f"127.0.0.1:{CLOSED}",
        "python",
        str(TO_CLOSED),
    )
    screenshot(page, "udp-calls")

"""Issue 18 item 1: every headline number of a lossy transfer is what an engineer checks it
against. A bulk transfer of a known size runs in a network namespace whose nftables table
drops ~3% of the data segments at random (`numgen random mod 100 < 3`); `nettrail collect`
ships the namespace's records to the webapp; the Overview's retransmitted segments per
second and both ends' connection pages (bytes each way, retransmitted segments and bytes,
state, packets each way) are compared with `ss -tin`, the namespace's nstat counter
TcpRetransSegs and the sender's own byte count, each for equality: a connection's packets and
bytes are its socket's own tcp_info counters (segs_out, segs_in, bytes_sent, bytes_received),
so duplicate segments the receiver got under loss add no bytes in."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from nettrail.commands.up import COLLECTOR_PROVIDERS
from tests.netns_lab import Netns, netns_lab, receive

from .conftest import HOST, Server, screenshot
from .kernel_env import collecting, need_root_and_btf

pytestmark = [pytest.mark.browser, pytest.mark.kernel, pytest.mark.slow]
TOTAL = 3_000_000  # bytes the sender writes: its own count
LOSS_PERCENT = 3
RATE_WINDOW_S = 10  # webapp/dashboard/api.py: the Overview's rates are the last 10 s / 10


@pytest.fixture()
def lab() -> Iterator[Netns]:
    need_root_and_btf("network namespace, nftables, eBPF")
    with netns_lab() as ns:
        ns.wire_like()  # one segment per skb: a drop rule drops segments, as a wire does
        yield ns


@pytest.fixture()
def collector(server: Server, lab: Netns, tmp_path: Path) -> Iterator[None]:
    # nettrail up's default set: the numbers users see are the always-on ones
    options = ("--providers", COLLECTOR_PROVIDERS, "--filter", f"netns={lab.inode}", "--flow-interval", "0.5")
    with collecting(server, tmp_path, *options, "--no-stack-counters") as col:
        col.wait_tracing()
        yield


def ss_info(ns: Netns, port: int) -> dict[str, int]:
    """`ss -tin` of the namespace's socket whose local port is `port`: its counters."""
    out = ns.run("ss", "-tinH", "state", "established", f"( sport = :{port} )")
    fields = {
        k: int(v) for k, v in re.findall(r"\b(bytes_sent|bytes_retrans|bytes_received|segs_out|segs_in):(\d+)", out)
    }
    total = re.search(r"\bretrans:\d+/(\d+)", out)
    fields["retrans_total"] = int(total.group(1)) if total else 0
    return fields


def conn_until(server: Server, cookies: dict[str, str], port: int, want: dict[str, Any]) -> dict[str, Any]:
    """The dashboard's record of the socket on `port` once its fields in `want` have those
    values (its counters are shipped every 0.5 s), or as it stands after 10 s."""
    deadline = time.monotonic() + 10
    conn = api_conn(server, cookies, port)
    while (conn is None or {k: conn[k] for k in want} != want) and time.monotonic() < deadline:
        time.sleep(0.3)
        conn = api_conn(server, cookies, port)
    assert conn is not None
    return conn


def api_conn(server: Server, cookies: dict[str, str], port: int) -> dict[str, Any] | None:
    """The dashboard's record of the socket whose local port is `port`, or None yet."""
    rows = requests.get(f"{server.url}/api/dash/connections", params={"q": f"sport {port}"}, cookies=cookies, timeout=5)
    found = [r for r in rows.json()["rows"] if r["sport"] == port]
    if not found:
        return None
    detail = requests.get(f"{server.url}/api/dash/connections/{found[0]['conn_uuid']}", cookies=cookies, timeout=5)
    return dict(detail.json()["conn"])


def test_a_lossy_transfers_headline_numbers_match_ss_nstat_and_the_senders_count(
    server: Server, page: Any, lab: Netns, collector: None
) -> None:
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    page.goto(f"{server.url}/")
    page.wait_for_selector(f'#hosts tr[data-host="{HOST}"]')
    listener = lab.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    lab.drop(port, f"meta length > 200 numgen random mod {100} < {LOSS_PERCENT}")  # data segments only
    before = lab.counters()
    client = lab.socket()
    client.connect(("127.0.0.1", port))
    srv, _ = listener.accept()
    reader = threading.Thread(target=receive, args=(srv, TOTAL))
    reader.start()
    client.sendall(b"t" * TOTAL)  # the sender's own count: TOTAL bytes
    reader.join(30)
    time.sleep(0.5)  # the last ACKs; the connection stays open, quiet
    retrans_segs = lab.counters()["TcpRetransSegs"] - before["TcpRetransSegs"]
    cport = client.getsockname()[1]
    sender, receiver = ss_info(lab, cport), ss_info(lab, port)
    assert retrans_segs > 0 and sender["retrans_total"] == retrans_segs  # the loss happened, ss and nstat agree
    assert receiver["bytes_received"] == TOTAL and sender["bytes_sent"] == TOTAL + sender["bytes_retrans"]

    # the Overview: retransmitted segments per second over its window, the kernel's unit
    expected_rate = page.evaluate(f"NT.num({retrans_segs} / {RATE_WINDOW_S}, 1)")
    page.wait_for_function(
        f"""document.querySelector('#hosts tr[data-host="{HOST}"] [data-counter="retrans"]').textContent
            === {expected_rate!r}""",
        timeout=8000,
    )

    # the sender's connection page, once its counters have been shipped (every 0.5 s)
    want = {
        "bytes_out": sender["bytes_sent"],  # what the sender put on the wire, retransmissions included
        "retrans_bytes_out": sender["bytes_retrans"],
        "retrans_segs": retrans_segs,
        "bytes_in": 0,
        "packets_out": sender["segs_out"],  # segments, retransmissions included, not buffers
        "packets_in": sender["segs_in"],
        "state": "ESTABLISHED",
    }
    conn = conn_until(server, cookies, cport, want)
    assert {k: conn[k] for k in want} == want
    # the receiving end: what it got is what was sent, each byte once although loss made the
    # sender retransmit (and some of those were duplicates); its packets are its own segments
    peer_want = {
        "bytes_in": receiver["bytes_received"],
        "bytes_out": 0,
        "packets_in": receiver["segs_in"],
        "packets_out": receiver["segs_out"],
        "state": "ESTABLISHED",
    }
    peer = conn_until(server, cookies, port, peer_want)
    assert {k: peer[k] for k in peer_want} == peer_want and peer["bytes_in"] == TOTAL
    page.goto(f"{server.url}/connections/{conn['conn_uuid']}/")
    page.wait_for_selector("body[data-loaded='1']")
    shown = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('#summary div')].map(d => [d.querySelector('dt').textContent, d.querySelector('dd').textContent]))"
    )
    expect = page.evaluate(
        "([s, segs]) => ({out: `${NT.bytes(s.bytes_sent)} (incl. ${NT.bytes(s.bytes_retrans)} retransmitted)`,"
        " retrans: `${NT.num(segs)} segments, ${NT.bytes(s.bytes_retrans)}`, in: NT.bytes(0),"
        " pout: NT.num(s.segs_out), pin: NT.num(s.segs_in)})",
        [sender, retrans_segs],
    )
    assert (
        shown["Bytes out"],
        shown["Retransmitted"],
        shown["Bytes in"],
        shown["Packets out"],
        shown["Packets in"],
        shown["State"],
    ) == (expect["out"], expect["retrans"], expect["in"], expect["pout"], expect["pin"], "ESTABLISHED")
    screenshot(page, "connection-lossy-truth")
    client.close()
    srv.close()
    listener.close()

"""Kernel tests of the skb provider's drops: reasons from BTF, kernel locations, exact counts, sender attribution."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from tests.kernel_expect import drop_reason
from tests.kernel_support import free_port, kernel, tracing
from translators.records import DropCount, SkbDrop

pytestmark = kernel


def udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def counts(records: list, reason: str) -> int:  # type: ignore[type-arg]
    return sum(r.delta for r in records if isinstance(r, DropCount) and r.drop_reason_str == reason)


@pytest.mark.matrix
def test_datagrams_to_a_closed_port_are_no_socket_drops_attributed_to_the_sender() -> None:
    """NO_SOCKET from 5.17; before, kfree_skb passes no reason: NOT_SPECIFIED, and said."""
    port = udp_port()
    reason = drop_reason("NO_SOCKET")
    with tracing(("skb",), port=port, counts_every=0.1) as cap:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _ in range(5):
                s.sendto(b"nobody home", ("127.0.0.1", port))
            sport = s.getsockname()[1]
        records = cap.wait_for(lambda recs: counts(recs, reason) >= 5)
        records = cap.settle(quiet=0.2)  # nothing more may come
        status_said = cap.lost("skb", "skb_drop.drop_reason")
    assert status_said == (reason != "NO_SOCKET")
    drops = [r for r in records if isinstance(r, SkbDrop)]
    assert [(r.drop_reason_str, r.l4_proto, r.src, r.sport, r.dst, r.dport) for r in drops] == [
        (reason, "udp", "127.0.0.1", sport, "127.0.0.1", port)
    ] * 5
    assert {(r.pid, r.attribution, r.protocol, r.if_name) for r in drops} == {(os.getpid(), "owner-map", 0x0800, "lo")}
    assert all(r.drop_location and r.drop_location.split("+")[0] for r in drops)
    assert counts(records, reason) == 5
    [count] = [r for r in records if isinstance(r, DropCount)]
    assert (count.count, count.protocol, count.drop_location) == (5, 0x0800, drops[0].drop_location)


@pytest.fixture
def nft_drop_udp():  # type: ignore[no-untyped-def]
    table = f"nettrail_skb_test_{os.getpid()}"

    def make(port: int) -> None:
        rules = f"table inet {table} {{\n chain inp {{\n type filter hook input priority 0;\n udp dport {port} drop\n }}\n}}\n"
        subprocess.run(["nft", "-f", "-"], input=rules, text=True, check=True)

    yield make
    subprocess.run(["nft", "delete", "table", "inet", table], check=False)


def test_an_nftables_rule_gives_netfilter_drops_counted_exactly_even_when_events_are_rate_limited(nft_drop_udp) -> None:  # type: ignore[no-untyped-def]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("127.0.0.1", 0))
        port = rx.getsockname()[1]
        nft_drop_udp(port)
        with tracing(("skb",), port=port, drop_rate=3, counts_every=0.1) as cap:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                for _ in range(40):
                    s.sendto(b"filtered", ("127.0.0.1", port))
            records = cap.wait_for(lambda recs: counts(recs, drop_reason("NETFILTER_DROP")) >= 40)
    events = [r for r in records if isinstance(r, SkbDrop)]
    assert counts(records, drop_reason("NETFILTER_DROP")) == 40
    assert 1 <= len(events) <= 3 * os.cpu_count()  # type: ignore[operator]  # at most drop_rate per CPU per second
    assert {r.drop_reason_str for r in events} == {drop_reason("NETFILTER_DROP")}


def test_a_closed_tcp_port_gives_a_no_socket_drop_of_the_syn() -> None:
    port = free_port()
    with tracing(("skb",), port=port, counts_every=0.1) as cap:
        c = socket.socket()
        assert c.connect_ex(("127.0.0.1", port)) == 111
        c.close()
        records = cap.wait_for(lambda recs: counts(recs, drop_reason("NO_SOCKET")) >= 1)
    drops = [r for r in records if isinstance(r, SkbDrop)]
    assert [(r.drop_reason_str, r.l4_proto, r.dport) for r in drops] == [(drop_reason("NO_SOCKET"), "tcp", port)]

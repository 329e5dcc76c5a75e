"""Kernel test: an IPv4 datagram fragmented by a 1,500-byte MTU is one datagram to the udp
provider and one flow to ip-flows, and only its first fragment carries ports (issue 16,
item 3). Real traffic over a veth pair between two namespaces the test makes (tests/veth_lab.py),
filtered on the receiver's port, which the kernel keeps for the later fragments of a datagram
whose first fragment it saw (map `frag_ports`). Keep in sync with kmod (ip_packet, udp_packet,
frag_ports) and translators/ip.py."""

from __future__ import annotations

import socket

import pytest

from tests.kernel_support import kernel, tracing
from tests.netns_lab import netns_lab
from tests.veth_lab import veth_lab
from translators.records import FlowCounters, IpFlowCounters, IpPacket, Record, UdpDatagram

pytestmark = kernel

PAYLOAD = 4096  # + 8 (UDP) = 4104 bytes in three fragments: 1480 + 1480 + 1144
FRAGMENTS = [(0, 1480), (1480, 1480), (2960, 1144)]  # (offset, IP payload) of each


@pytest.fixture(scope="module")
def datagram_over_veth() -> tuple[list[Record], int, int]:
    """One datagram a -> b; the records of a collector filtered on b's port, the ports."""
    with veth_lab(gro=False) as lab:
        rx = lab.socket(lab.b, socket.AF_INET, socket.SOCK_DGRAM)
        tx = lab.socket(lab.a, socket.AF_INET, socket.SOCK_DGRAM)
        with rx, tx:
            rx.bind((lab.addr_b, 0))
            tx.bind((lab.addr_a, 0))
            port, sport = rx.getsockname()[1], tx.getsockname()[1]
            with tracing(("udp", "ip", "ip-flows"), port=port, counts_every=0.1) as cap:
                tx.sendto(b"f" * PAYLOAD, (lab.addr_b, port))
                rx.settimeout(2.0)
                assert len(rx.recv(65536)) == PAYLOAD
                ours = lambda recs: [r for r in recs if isinstance(r, FlowCounters)]  # noqa: E731
                records = cap.wait_for(lambda recs: len(ours(recs)) >= 2)
                records = cap.settle(quiet=0.3)
    return records, sport, port


def test_a_fragmented_datagram_is_one_udp_send_one_receive_and_one_flow_each_way(
    datagram_over_veth: tuple[list[Record], int, int],
) -> None:
    records, sport, port = datagram_over_veth
    wire = [r for r in records if isinstance(r, UdpDatagram) and r.hook != "tp_btf/sock_send_length"]
    wire = [r for r in wire if r.hook != "tp_btf/sock_recv_length"]
    assert sorted((r.probe, r.sport, r.dport, r.length, r.payload_length) for r in wire) == [
        ("receive", sport, port, PAYLOAD + 8, PAYLOAD),
        ("send", sport, port, PAYLOAD + 8, PAYLOAD),
    ]
    flows = [r for r in records if isinstance(r, FlowCounters)]
    assert sorted((r.packets_out, r.bytes_out, r.packets_in, r.bytes_in) for r in flows) == [
        (0, 0, 1, PAYLOAD),
        (1, PAYLOAD, 0, 0),
    ]
    # ip-flows: the three fragments each way counted in the datagram's own flow entry
    ipflows = [r for r in records if isinstance(r, IpFlowCounters)]
    assert sorted((r.direction, r.sport, r.dport, r.packets, r.bytes) for r in ipflows) == [
        ("receive", sport, port, 3, PAYLOAD + 8 + 3 * 20),
        ("send", sport, port, 3, PAYLOAD + 8 + 3 * 20),
    ]


def test_only_the_first_fragment_of_a_datagram_carries_ports(datagram_over_veth: tuple[list[Record], int, int]) -> None:
    records, sport, port = datagram_over_veth
    packets = [r for r in records if isinstance(r, IpPacket)]
    for probe in ("send", "receive"):
        got = sorted(
            (r.frag_offset, r.payload_length, r.is_fragment, r.sport, r.dport) for r in packets if r.probe == probe
        )
        assert got == [
            (0, 1480, True, sport, port),
            (1480, 1480, True, None, None),
            (2960, 1144, True, None, None),
        ], probe


def test_an_ipv6_datagram_in_fragments_is_one_udp_receive_and_only_its_first_fragment_has_ports() -> None:
    """IPv6 fragments sit behind a fragment header, which the kernel does not walk: the
    translators do (translators/ip6ext.py), so the records are filtered on the namespace."""
    with veth_lab(gro=False) as lab:
        rx = lab.socket(lab.b, socket.AF_INET6, socket.SOCK_DGRAM)
        tx = lab.socket(lab.a, socket.AF_INET6, socket.SOCK_DGRAM)
        with rx, tx:
            rx.bind((lab.addr6_b, 0))
            tx.bind((lab.addr6_a, 0))
            port, sport = rx.getsockname()[1], tx.getsockname()[1]
            with tracing(("udp", "ip"), netns=lab.netns_b) as cap:
                tx.sendto(b"f" * PAYLOAD, (lab.addr6_b, port))
                rx.settimeout(2.0)
                assert len(rx.recv(65536)) == PAYLOAD
                records = cap.settle(quiet=0.5)
    wire = [r for r in records if isinstance(r, UdpDatagram) and r.hook == "tp_btf/netif_receive_skb"]
    assert [(r.sport, r.dport, r.length) for r in wire] == [(sport, port, PAYLOAD + 8)]
    packets = [r for r in records if isinstance(r, IpPacket) and r.protocol == socket.IPPROTO_UDP]
    # 1,500 - 40 - 8 (fragment header) = 1,452, cut to a multiple of 8: 1,448 per fragment
    assert sorted((r.frag_offset, r.sport, r.dport) for r in packets) == [
        (0, sport, port),
        (1448, None, None),
        (2896, None, None),
    ]


def test_on_loopback_each_fragment_counts_in_its_datagrams_flow_when_sent_and_when_received() -> None:
    """Loopback delivers each fragment as it is sent, so the sent and received fragments of one
    datagram interleave: the kernel keeps their ports apart by direction."""
    with netns_lab() as ns:
        ns.wire_like()  # a 1,500-byte MTU: 64 KiB loopback would not fragment
        rx = ns.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tx = ns.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with rx, tx:
            rx.bind(("127.0.0.1", 0))
            tx.bind(("127.0.0.1", 0))
            port, sport = rx.getsockname()[1], tx.getsockname()[1]
            with tracing(("udp", "ip-flows"), port=port, counts_every=0.1) as cap:
                tx.sendto(b"f" * PAYLOAD, ("127.0.0.1", port))
                rx.settimeout(2.0)
                assert len(rx.recv(65536)) == PAYLOAD
                done = lambda recs: len([r for r in recs if isinstance(r, IpFlowCounters)]) >= 2  # noqa: E731
                records = cap.wait_for(done)
                records = cap.settle(quiet=0.3)
    ipflows = [r for r in records if isinstance(r, IpFlowCounters)]
    assert sorted((r.direction, r.sport, r.dport, r.packets, r.bytes) for r in ipflows) == [
        ("receive", sport, port, 3, PAYLOAD + 8 + 3 * 20),
        ("send", sport, port, 3, PAYLOAD + 8 + 3 * 20),
    ]
    flows = [r for r in records if isinstance(r, FlowCounters)]
    assert [(r.packets_out, r.bytes_out, r.packets_in, r.bytes_in) for r in flows] == [(1, PAYLOAD, 1, PAYLOAD)]

"""Kernel test: an IPv6 datagram carrying hop-by-hop and destination-options headers is
recorded by the ip and udp providers with its real protocol, ports and header length
(the kernel copies the bytes after the fixed header, the translators walk the chain)."""

from __future__ import annotations

import socket
import time

from tests.kernel_support import kernel, tracing
from tests.veth_lab import veth_lab
from translators.records import IpPacket, UdpDatagram

pytestmark = kernel

# an 8-byte options header: next header (the kernel fills it), length 0, PadN of 4 zero bytes
OPTIONS_HEADER = bytes([0, 0, 1, 4, 0, 0, 0, 0])


def test_an_ipv6_datagram_behind_hop_by_hop_and_destination_options_is_walked_to_udp() -> None:
    with veth_lab(gro=False) as lab:
        rx = lab.socket(lab.b, socket.AF_INET6, socket.SOCK_DGRAM)
        rx.bind((lab.addr6_b, 0))
        port = rx.getsockname()[1]
        tx = lab.socket(lab.a, socket.AF_INET6, socket.SOCK_DGRAM)
        tx.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_HOPOPTS, OPTIONS_HEADER)
        tx.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_DSTOPTS, OPTIONS_HEADER)
        tx.bind((lab.addr6_a, 0))
        sport = tx.getsockname()[1]
        with tracing(("ip", "udp"), netns=lab.netns_b) as cap:
            time.sleep(0.05)
            tx.sendto(b"e" * 100, (lab.addr6_b, port))
            rx.settimeout(5)
            assert rx.recv(1000) == b"e" * 100

            def mine(recs: list) -> list:  # type: ignore[type-arg]
                return [r for r in recs if getattr(r, "dport", None) == port and r.hook == "tp_btf/netif_receive_skb"]

            records = cap.wait_for(lambda recs: len(mine(recs)) >= 2)
        tx.close()
        rx.close()
    got = mine(records)
    [ip] = [r for r in got if isinstance(r, IpPacket)]
    assert (ip.protocol, ip.protocol_name, ip.header_length) == (17, "UDP", 56)  # 40 + 8 + 8
    assert (ip.src, ip.sport, ip.dst, ip.dport) == (lab.addr6_a, sport, lab.addr6_b, port)
    assert (ip.length, ip.payload_length, ip.is_fragment, ip.approx) == (164, 108, False, [])
    assert ip.if_name == lab.dev_b
    [udp] = [r for r in got if isinstance(r, UdpDatagram)]
    assert (udp.provider, udp.probe, udp.sport, udp.dport) == ("udp", "receive", sport, port)
    assert (udp.length, udp.payload_length, udp.if_name) == (108, 100, lab.dev_b)

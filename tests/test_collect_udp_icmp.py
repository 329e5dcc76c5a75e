"""Kernel test: ICMP errors answering UDP are not `udp send` records (issue 16, item 3).
A connected UDP socket sends to a closed port: the first datagram goes out and an ICMP port
unreachable comes back; the kernel hands that error to the next send, which fails with
ECONNREFUSED having sent nothing. Only datagrams are `udp_datagram` records: the ICMP reply is
an `ip_packet` of protocol ICMP, the failed call a `sock_event` `send-error`, and a call on
an unconnected socket names the address it sent to (the cgroup sendmsg hook,
kmod/udp_peer.bpf.c), its local end the socket's (0.0.0.0 / :: unbound). Counts against the
namespace's own SNMP counters. Keep in sync with translators/udp.py (translate_failed_call)."""

from __future__ import annotations

import errno
import socket

import pytest

from tests.kernel_support import kernel, tracing
from tests.netns_lab import delta, netns_lab
from translators.records import IpPacket, SockEvent, UdpDatagram

pytestmark = kernel

ICMP_PROTOCOLS = {socket.AF_INET: 1, socket.AF_INET6: 58}
PORT, OTHER_PORT = 9, 19  # discard, chargen: nothing listens in a fresh namespace


@pytest.mark.parametrize(("family", "host"), [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
def test_a_port_unreachable_is_an_icmp_packet_and_the_failed_send_a_send_error(family: int, host: str) -> None:
    with netns_lab() as ns:
        with tracing(("udp", "ip"), netns=ns.inode) as cap:
            before = ns.counters()
            with ns.socket(family, socket.SOCK_DGRAM) as tx:
                tx.connect((host, PORT))
                tx.send(b"u" * 100)  # goes out; the ICMP error is queued on the socket
                with pytest.raises(ConnectionRefusedError):
                    tx.send(b"u" * 100)  # sends nothing: it reports that error
                tx.send(b"u" * 100)  # the error was consumed: goes out
                sport = tx.getsockname()[1]
            with ns.socket(family, socket.SOCK_DGRAM) as unconnected:
                unconnected.sendto(b"v" * 50, (host, OTHER_PORT))  # unconnected: never told of the ICMP error
                other = unconnected.getsockname()[1]
            after = ns.counters()
            records = cap.settle(quiet=0.5)
    if family == socket.AF_INET:  # /proc/net/snmp has IPv4's counters only
        counts = delta(before, after, "UdpOutDatagrams", "IcmpOutDestUnreachs")
        assert counts == {"UdpOutDatagrams": 3, "IcmpOutDestUnreachs": 3}
    datagrams = [r for r in records if isinstance(r, UdpDatagram)]
    wire = sorted((r.probe, r.sport, r.dport, r.payload_length) for r in datagrams if r.bytes is None)
    assert wire == sorted(
        [("send", sport, PORT, 100), ("receive", sport, PORT, 100)] * 2
        + [("send", other, OTHER_PORT, 50), ("receive", other, OTHER_PORT, 50)]
    )
    any_addr = "0.0.0.0" if family == socket.AF_INET else "::"
    calls = sorted((r.probe, r.src, r.sport, r.dst, r.dport, r.bytes) for r in datagrams if r.bytes is not None)
    assert calls == sorted(
        [("send", host, sport, host, PORT, 100)] * 2 + [("send", any_addr, other, host, OTHER_PORT, 50)]
    )
    errors = [r for r in records if isinstance(r, SockEvent)]
    assert [(r.probe, r.proto, r.rc, r.sk_err, r.sport, r.dport) for r in errors] == [
        ("send-error", "udp", -errno.ECONNREFUSED, errno.ECONNREFUSED, sport, PORT)
    ]
    icmp = [r for r in records if isinstance(r, IpPacket) and r.protocol == ICMP_PROTOCOLS[family]]
    # one port unreachable per datagram to a closed port, each quoting it (so longer than 100 bytes)
    assert sorted((r.probe, r.length > 100) for r in icmp if r.length) == [("receive", True)] * 3 + [("send", True)] * 3

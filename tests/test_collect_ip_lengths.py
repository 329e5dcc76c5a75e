"""Kernel test: ip records carry the real length of GSO/GRO and BIG TCP skbs (issue 16, item 3).
Loopback's MTU is 65,536, so a full-size IPv4 skb cannot state its length in the 16-bit total
length (the kernel writes 0), nor can IPv6's payload length + 40 fit 16 bits; the records take
the length from the skb. The identity: the IP payload bytes of a direction's records minus
the TCP headers (32 bytes with timestamps, 40 on the SYN) equal the bytes the test sent (plus
any the sender retransmitted, from the tcp provider's records).
Traffic in a namespace the test makes, so every record of the collector's netns filter is
the test's. Keep in sync with kmod (ip_packet) and translators/ip.py."""

from __future__ import annotations

import socket
import threading

import pytest

from tests.kernel_support import kernel, tracing
from tests.netns_lab import netns_lab
from translators.records import IpPacket, Record, TcpRetransmit

pytestmark = kernel

SENT = 1_000_000
TCP_HEADER, SYN_HEADER = 32, 40  # timestamps on (set below); the SYN adds MSS, SACK-permitted and window scale


def transfer(family: int, host: str) -> tuple[list[Record], int]:
    """SENT bytes client -> server over the namespace's loopback; the records and the server's port."""
    with netns_lab(net__ipv4__tcp_timestamps="1", net__ipv4__tcp_sack="1") as ns:
        lst = ns.socket(family)
        lst.bind((host, 0))
        port = lst.getsockname()[1]
        lst.listen()
        got = 0
        with tracing(("ip", "tcp"), netns=ns.inode, ringbuf=1 << 24) as cap:
            client = ns.socket(family)
            client.connect((host, port))
            server, _ = lst.accept()

            def send() -> None:
                client.sendall(b"g" * SENT)
                client.shutdown(socket.SHUT_WR)

            sender = threading.Thread(target=send)
            sender.start()
            server.settimeout(10)
            while chunk := server.recv(1 << 20):
                got += len(chunk)
            sender.join(10)
            for s in (client, server, lst):
                s.close()
            records = cap.settle(quiet=0.5)
    assert got == SENT
    return records, port


@pytest.mark.parametrize(("family", "host"), [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
def test_ip_bytes_of_each_hook_add_up_to_the_bytes_sent_plus_the_tcp_headers(family: int, host: str) -> None:
    records, port = transfer(family, host)
    # a busy machine may delay the receiver into a loss probe or an RTO: those bytes go twice
    resent = sum(r.tcp_payload_len or 0 for r in records if isinstance(r, TcpRetransmit) and r.err == 0)
    for probe in ("send", "receive"):
        ours = [r for r in records if isinstance(r, IpPacket) and r.probe == probe and r.dport == port]
        syns = [r for r in ours if r.gso_segs == 1 and r.payload_length == SYN_HEADER]
        assert len(syns) == 1, probe
        data = sum(r.payload_length or 0 for r in ours) - SYN_HEADER - TCP_HEADER * (len(ours) - 1)
        assert data == SENT + resent, probe
    # the skbs above 64 KiB are the ones whose header cannot say their length
    sent = [r.length or 0 for r in records if isinstance(r, IpPacket) and r.probe == "send" and r.dport == port]
    assert max(sent) > 65535

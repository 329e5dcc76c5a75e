"""Kernel test of the udp provider's queue failures: a full receive buffer, against the kernel's own counter."""

from __future__ import annotations

import socket

from tests.kernel_support import kernel, tracing
from translators.records import DropCount, SkbDrop, SockEvent

pytestmark = kernel


def snmp_udp(name: str) -> int:
    lines = [ln.split() for ln in open("/proc/net/snmp") if ln.startswith("Udp:")]
    return int(lines[1][lines[0].index(name)])


def test_a_full_receive_buffer_gives_udp_fail_queue_records_and_socket_rcvbuff_drops_matching_the_kernel() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)  # the kernel's minimum: a few datagrams fit
        rx.bind(("127.0.0.1", 0))
        port = rx.getsockname()[1]
        with tracing(("udp", "skb"), port=port, counts_every=0.1) as cap:
            before = snmp_udp("RcvbufErrors")
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
                for _ in range(50):  # the reader sleeps: most of these cannot be queued
                    tx.sendto(b"z" * 1000, ("127.0.0.1", port))
            after = snmp_udp("RcvbufErrors")
            fails = lambda recs: [r for r in recs if isinstance(r, SockEvent)]  # noqa: E731
            records = cap.wait_for(lambda recs: len(fails(recs)) >= 1 and any(isinstance(r, DropCount) for r in recs))
            records = cap.wait_for(lambda recs: False, timeout=0.3)
    failed = fails(records)
    # RcvbufErrors is host-wide; on a quiet loopback port it moves by exactly our failures
    assert len(failed) == after - before > 10
    r = failed[0]
    # the receiving socket: unconnected, so the remote side is empty
    assert (r.provider, r.probe, r.proto, r.rc, r.src, r.sport, r.dst, r.dport) == (
        "udp", "udp-fail-queue", "udp", -12, "127.0.0.1", port, "0.0.0.0", 0,
    )  # fmt: skip
    assert (
        r.rcvbuf is not None
        and r.rmem_alloc is not None
        and r.truesize is not None
        and r.rmem_alloc + r.truesize > r.rcvbuf
    )
    drops = [d for d in records if isinstance(d, SkbDrop) and d.drop_reason_str == "SOCKET_RCVBUFF"]
    assert len(drops) == len(failed)
    assert sum(c.delta for c in records if isinstance(c, DropCount) and c.drop_reason_str == "SOCKET_RCVBUFF") == len(
        failed
    )

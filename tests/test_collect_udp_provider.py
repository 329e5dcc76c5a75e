"""Kernel test of the udp provider's queue failures: a full receive buffer, against the kernel's own counter."""

from __future__ import annotations

import os
import socket

import pytest

from tests.kernel_support import kernel, tracing
from translators.records import DropCount, FlowCounters, SkbDrop, SockEvent, UdpDatagram
from translators.udp import CALL_HOOKS

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
            records = cap.settle(quiet=0.3)
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


@pytest.mark.matrix
def test_datagrams_give_send_and_receive_records_calls_with_bytes_and_exact_flow_counters() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("127.0.0.1", 0))
        port = rx.getsockname()[1]
        with tracing(("udp",), port=port, counts_every=0.1) as cap:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
                tx.connect(("127.0.0.1", port))  # so the send calls carry the port the filter keeps
                for _ in range(30):
                    tx.send(b"d" * 100)
                    assert rx.recv(1000) == b"d" * 100
                sport = tx.getsockname()[1]
            flows = lambda recs: [r for r in recs if isinstance(r, FlowCounters) and r.packets_in == 30]  # noqa: E731
            records = cap.wait_for(lambda recs: bool(flows(recs)))
    wire = [
        r
        for r in records
        if isinstance(r, UdpDatagram) and r.hook in ("tp_btf/net_dev_queue", "tp_btf/netif_receive_skb")
    ]
    calls = [r for r in records if isinstance(r, UdpDatagram) and r.hook in CALL_HOOKS]
    assert sorted({(r.probe, r.src, r.sport, r.dst, r.dport, r.length, r.payload_length) for r in wire}) == [
        ("receive", "127.0.0.1", sport, "127.0.0.1", port, 108, 100),
        ("send", "127.0.0.1", sport, "127.0.0.1", port, 108, 100),
    ]
    assert [r.probe for r in wire].count("send") == 30 and [r.probe for r in wire].count("receive") == 30
    assert {r.pid for r in wire if r.probe == "send"} == {os.getpid()}  # the sending socket's owner
    # before 6.3 (no sock_send_length/sock_recv_length) the call records come from the
    # system calls; a kernel with neither has none, and says so
    expected = [] if cap.lost("udp", "udp_call.send") else [("send", 100, os.getpid())] * 30
    expected += [] if cap.lost("udp", "udp_call.receive") else [("receive", 100, os.getpid())] * 30
    assert sorted((r.probe, r.bytes, r.pid) for r in calls) == sorted(expected)
    [flow] = flows(records)
    assert (flow.proto, flow.src, flow.sport, flow.dport) == ("udp", "127.0.0.1", sport, port)
    assert (flow.packets_out, flow.bytes_out, flow.packets_in, flow.bytes_in) == (30, 3000, 30, 3000)

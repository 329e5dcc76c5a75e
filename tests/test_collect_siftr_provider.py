"""Kernel tests of the siftr provider: samples on a bulk transfer, in-kernel ppl sampling, exact flow counters."""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.kernel_support import bound_listener, cookie_of, kernel, tracing
from translators.records import FlowCounters, Record, SiftrSample

pytestmark = kernel


@contextmanager
def one_cpu() -> Iterator[None]:
    """Run sender and receiver on one CPU so samples are recorded in the order the socket changed."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def transfer(client: socket.socket, server: socket.socket, total: int) -> int:
    """Send total bytes client -> server from this one thread; returns bytes received."""
    client.setblocking(False)
    server.setblocking(False)
    block = b"s" * 65536
    sent = got = 0
    for _ in range(1_000_000):  # bounded; each round moves data or the kernel is stuck
        if got >= total:
            break
        if sent < total:
            try:
                sent += client.send(block[: min(len(block), total - sent)])
            except BlockingIOError:
                pass
        try:
            got += len(server.recv(1 << 20))
        except BlockingIOError:
            pass
    return got


def run_transfer(total: int, ppl: int) -> tuple[list[Record], int, int]:
    lst = bound_listener()
    port = lst.getsockname()[1]
    with tracing(("siftr",), ppl=ppl, port=port) as cap, one_cpu():
        lst.listen()
        client = socket.create_connection(("127.0.0.1", port))
        server, _ = lst.accept()
        sender, receiver = cookie_of(client), cookie_of(server)
        assert transfer(client, server, total) == total
        client.close()
        server.close()
        lst.close()
        records = cap.wait_for(
            lambda recs: {sender, receiver} <= {r.sock_cookie for r in recs if r.kind == "flow_counters"}
        )
    return records, sender, receiver


@pytest.mark.matrix
def test_a_bulk_transfer_gives_samples_with_cwnd_srtt_and_a_monotone_snd_una() -> None:
    records, sender, receiver = run_transfer(8 << 20, ppl=1)
    out = [r for r in records if isinstance(r, SiftrSample) and r.sock_cookie == sender and r.direction == "out"]
    assert len(out) > 20
    assert all(r.snd_cwnd and r.snd_cwnd > 0 for r in out)
    assert all(r.srtt and r.srtt > 0 for r in out)
    assert all(r.mss and r.snd_cwnd % r.mss == 0 for r in out)  # bytes = segments * mss
    una = [r.snd_una for r in out]
    assert all(((b - a) & 0xFFFFFFFF) < 1 << 31 for a, b in zip(una, una[1:], strict=False))  # mod 2^32
    assert (una[-1] - una[0]) & 0xFFFFFFFF > 4 << 20
    incoming = [r for r in records if isinstance(r, SiftrSample) and r.sock_cookie == receiver and r.direction == "in"]
    assert sum(r.data_sz or 0 for r in incoming) == 8 << 20  # ppl=1: every data segment is sampled
    first = out[0]
    assert (first.provider, first.probe, first.hook, first.pid) == (
        "siftr",
        "siftr",
        "tp_btf/net_dev_queue",
        os.getpid(),
    )
    assert first.conn_state == 4 and first.ca_state == "Open"  # FreeBSD ESTABLISHED


def test_ppl_10_samples_a_tenth_of_the_packets_while_flow_counters_count_every_byte() -> None:
    total = 4 << 20
    records, sender, receiver = run_transfer(total, ppl=10)
    flows = {r.sock_cookie: r for r in records if isinstance(r, FlowCounters)}
    assert flows[sender].bytes_out == total
    assert flows[receiver].bytes_in == total
    for cookie in (sender, receiver):
        flow = flows[cookie]
        packets = flow.packets_in + flow.packets_out
        samples = [r for r in records if isinstance(r, SiftrSample) and r.sock_cookie == cookie]
        assert flow.samples == math.ceil(packets / 10)  # the kernel's decision: packets 0, 10, 20, ...
        assert len(samples) == flow.samples  # and nothing lost on the way
        assert packets > 50


def test_flows_a_filter_rejects_are_neither_sampled_nor_counted_while_the_kept_flow_counts_exactly() -> None:
    """The kernel judges a flow once, at its first packet (flows_out keeps the rejected
    ones): the other port's flow leaves no trace, the filtered one every byte."""
    total = 1 << 20
    wanted, other = bound_listener(), bound_listener()
    port = wanted.getsockname()[1]
    with tracing(("siftr",), ppl=4, port=port) as cap, one_cpu():
        conns = []
        for lst in (other, wanted):
            lst.listen()
            client = socket.create_connection(("127.0.0.1", lst.getsockname()[1]))
            server, _ = lst.accept()
            assert transfer(client, server, total) == total
            conns.append((cookie_of(client), cookie_of(server)))
            client.close()
            server.close()
            lst.close()
        (other_c, other_s), (sender, receiver) = conns
        records = cap.wait_for(
            lambda recs: {sender, receiver} <= {r.sock_cookie for r in recs if r.kind == "flow_counters"}
        )
    assert not [r for r in records if r.sock_cookie in (other_c, other_s)]
    flows = {r.sock_cookie: r for r in records if isinstance(r, FlowCounters)}
    assert (flows[sender].bytes_out, flows[receiver].bytes_in) == (total, total)
    for cookie in (sender, receiver):
        packets = flows[cookie].packets_in + flows[cookie].packets_out
        assert flows[cookie].samples == math.ceil(packets / 4)


def socket_sharing_slot(cookie: int, slots: int) -> socket.socket:
    """A fresh TCP socket whose cookie falls in `cookie`'s flow slot. A cookie is given out
    when first asked for, in sequence (per CPU, in batches): ask until one lands there."""
    for _ in range(16 * slots):  # bounded: every residue comes round within a few batches
        s = socket.socket()
        if cookie_of(s) % slots == cookie % slots:
            return s
        s.close()
    raise AssertionError(f"no cookie in slot {cookie % slots} after {16 * slots} sockets")


def test_a_flow_whose_slot_is_taken_is_counted_and_sampled_exactly_in_the_overflow_map() -> None:
    """Two live flows in one flow_slots slot: the first holds it, the second is counted in
    the `flows` hash map; both count every byte and sample packet 0, 4, 8, ... exactly."""
    total = 1 << 20
    lst = bound_listener()
    port = lst.getsockname()[1]
    with tracing(("siftr",), ppl=4, port=port) as cap, one_cpu():
        lst.listen()
        first = socket.create_connection(("127.0.0.1", port))
        first_peer, _ = lst.accept()
        assert transfer(first, first_peer, total) == total  # `first` now holds its slot
        second = socket_sharing_slot(cookie_of(first), cap.session.map_size("flow_slots"))
        second.connect(("127.0.0.1", port))
        second_peer, _ = lst.accept()
        assert transfer(second, second_peer, total) == total
        senders = cookie_of(first), cookie_of(second)
        for s in (first, first_peer, second, second_peer, lst):
            s.close()
        records = cap.wait_for(lambda recs: set(senders) <= {r.sock_cookie for r in recs if r.kind == "flow_counters"})
    flows = {r.sock_cookie: r for r in records if isinstance(r, FlowCounters)}
    for cookie in senders:
        flow = flows[cookie]
        packets = flow.packets_in + flow.packets_out
        samples = [r for r in records if isinstance(r, SiftrSample) and r.sock_cookie == cookie]
        assert flow.bytes_out == total
        assert flow.samples == math.ceil(packets / 4) == len(samples)
        assert packets > 10

"""Kernel tests of the siftr provider: samples on a bulk transfer, in-kernel ppl sampling, exact
flow counters (the sockets' own tcp_info counters, as `ss -tin` shows them)."""

from __future__ import annotations

import math
import os
import socket
import struct
from dataclasses import dataclass

import pytest

from tests.kernel_support import bound_listener, cookie_of, kernel, one_cpu, tracing
from translators.records import FlowCounters, Record, SiftrSample

pytestmark = kernel


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


@dataclass(frozen=True)
class SeqSpace:
    covered: int  # distinct payload bytes
    holes: int  # bytes between the first and the last byte that no segment carried
    repeated: int  # payload bytes carried by more than one segment (retransmissions)


def sequence_space(samples: list[SiftrSample]) -> SeqSpace:
    """The payload ranges of these samples, relative to the first one (mod 2^32)."""
    data = [(r.th_seq or 0, r.data_sz or 0) for r in samples if r.data_sz]
    if not data:
        return SeqSpace(0, 0, 0)
    base = data[0][0]
    ranges = sorted((((seq - base) & 0xFFFFFFFF), ((seq - base) & 0xFFFFFFFF) + n) for seq, n in data)
    covered = holes = 0
    end = ranges[0][0]
    for lo, hi in ranges:
        holes += max(0, lo - end)
        covered += max(0, hi - max(lo, end))
        end = max(end, hi)
    return SeqSpace(covered, holes, sum(n for _, n in data) - covered)


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
    # ppl=1: every data segment is sampled, a retransmitted one each time it arrives. A slow
    # machine (a QEMU guest under TCG) sees spurious retransmissions (TLP, RTO) on loopback.
    got, sent = sequence_space(incoming), sequence_space(out)
    assert (got.covered, got.holes) == (8 << 20, 0)  # every byte arrived, in one contiguous range
    assert got.repeated <= sent.repeated  # a byte arrived twice only if it was sent twice
    assert sum(r.data_sz or 0 for r in incoming) == (8 << 20) + got.repeated
    first = out[0]
    assert (first.provider, first.probe, first.hook, first.pid) == (
        "siftr",
        "siftr",
        "tp_btf/net_dev_queue",
        os.getpid(),
    )
    assert first.conn_state == 4 and first.ca_state == "Open"  # FreeBSD ESTABLISHED


def test_ppl_10_samples_a_tenth_of_the_buffers_while_flow_counters_count_every_byte() -> None:
    total = 4 << 20
    records, sender, receiver = run_transfer(total, ppl=10)
    flows = {r.sock_cookie: r for r in records if isinstance(r, FlowCounters)}
    assert flows[sender].bytes_out == total
    assert flows[receiver].bytes_in == total + 1  # ss's bytes_received: the peer's FIN counts one
    for cookie in (sender, receiver):
        flow = flows[cookie]
        samples = [r for r in records if isinstance(r, SiftrSample) and r.sock_cookie == cookie]
        assert flow.skbs is not None and flow.skbs > 50
        assert flow.samples == math.ceil(flow.skbs / 10)  # the kernel's decision: buffers 0, 10, 20, ...
        assert len(samples) == flow.samples  # and nothing lost on the way


# struct tcp_info (include/uapi/linux/tcp.h): the counters `ss -tin` prints, at their offsets
# (bytes_sent and bytes_retrans since 4.19)
TCP_INFO = {"bytes_received": ("<Q", 128), "segs_out": ("<I", 136), "segs_in": ("<I", 140),
            "bytes_sent": ("<Q", 200), "bytes_retrans": ("<Q", 208)}  # fmt: skip


def tcp_info(s: socket.socket) -> dict[str, int]:
    raw = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return {name: int(struct.unpack_from(fmt, raw, off)[0]) for name, (fmt, off) in TCP_INFO.items()}


def as_ss(flow: Record) -> dict[str, int]:
    """A flow_counters record in ss's names: which field equals which (docs/collector.md)."""
    assert isinstance(flow, FlowCounters)
    return {"segs_in": flow.packets_in, "segs_out": flow.packets_out, "bytes_received": flow.bytes_in,
            "bytes_sent": flow.bytes_out}  # fmt: skip


@pytest.mark.matrix
def test_flow_counters_are_each_sockets_tcp_info_segments_not_buffers() -> None:
    """At a 1,448-byte MSS the sender's TSO/GSO buffers carry many segments each, and loopback
    hands them to the receiver whole, as GRO would: each end's flow_counters, read from the
    kernel's map while the connection is open and quiet, equal its own tcp_info (segs_in,
    segs_out, bytes_received, bytes_sent: what ss -tin shows), and the bytes equal what each
    end wrote."""
    total, reply = 4 << 20, 5000
    lst = bound_listener()
    port = lst.getsockname()[1]
    with tracing(("siftr",), ppl=8, port=port, counts_every=0.2) as cap:
        lst.listen()
        client = socket.socket()
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1448)
        client.connect(("127.0.0.1", port))
        server, _ = lst.accept()
        assert transfer(client, server, total) == total
        assert transfer(server, client, reply) == reply
        sender_cookie, receiver_cookie = cookie_of(client), cookie_of(server)
        socks = {sender_cookie: client, receiver_cookie: server}

        def settled(recs: list[Record]) -> bool:
            latest = {r.sock_cookie: r for r in recs if isinstance(r, FlowCounters)}
            return all(c in latest and as_ss(latest[c]) == {k: v for k, v in tcp_info(s).items() if k != "bytes_retrans"}
                       for c, s in socks.items())  # fmt: skip

        records = cap.wait_for(settled, timeout=20)  # a quiet connection: its last report is current
        infos = {c: tcp_info(s) for c, s in socks.items()}
        for s in (client, server, lst):
            s.close()
    latest = {r.sock_cookie: r for r in records if isinstance(r, FlowCounters)}
    sender, receiver = latest[sender_cookie], latest[receiver_cookie]
    assert {c: as_ss(latest[c]) for c in socks} == {
        c: {k: v for k, v in info.items() if k != "bytes_retrans"} for c, info in infos.items()
    }
    assert sender.bytes_out == total + infos[sender.sock_cookie]["bytes_retrans"] and receiver.bytes_in == total
    assert (receiver.bytes_out, sender.bytes_in) == (reply, reply)
    assert sender.skbs is not None and sender.packets_out > sender.skbs  # segments outnumber the buffers


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
    assert (flows[sender].bytes_out, flows[receiver].bytes_in) == (total, total + 1)  # the FIN counts one
    for cookie in (sender, receiver):
        assert flows[cookie].samples == math.ceil((flows[cookie].skbs or 0) / 4)


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
    the `flows` hash map; both count every byte and sample buffer 0, 4, 8, ... exactly."""
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
        samples = [r for r in records if isinstance(r, SiftrSample) and r.sock_cookie == cookie]
        assert flow.bytes_out == total
        assert flow.skbs is not None and flow.skbs > 10
        assert flow.samples == math.ceil(flow.skbs / 4) == len(samples)

"""ip-flows' per-CPU slots in front of the ip_flows LRU map (kmod/ip.bpf.c, ip_slot_take;
collector/bpf/source.py, _ip_flow_entries): two flows whose keys share a slot take it
from each other, each move carrying the counts into the LRU entry, and every packet
is still counted once, whether the collector reads between the moves or while they
happen.

The thread is pinned to one CPU, so both flows meet in that CPU's slot (loopback
delivers a datagram in the sender's context, on the same CPU).
"""

from __future__ import annotations

import multiprocessing
import os
import socket
from collections import Counter
from typing import Any

import numpy as np
import pytest

from collector.bpf import layout
from collector.bpf.source import ip_slot_index
from tests.kernel_support import kernel, one_cpu
from tests.test_collect_ip_flows import LO_INDEX, final_counters, ip_tracing

pytestmark = kernel
LOCALHOST = socket.inet_aton("127.0.0.1") + bytes(12)


def slot_of(sport: int, dport: int, direction: int) -> int:
    key = np.zeros((), dtype=layout.dtype_of(layout.IP_FLOW_KEY))
    key["netns"] = os.stat("/proc/self/ns/net").st_ino
    key["if_index"] = LO_INDEX
    key["sport"], key["dport"] = sport, dport
    key["version"], key["protocol"], key["direction"] = 4, socket.IPPROTO_UDP, direction
    key["saddr"] = key["daddr"] = np.void(LOCALHOST)
    return ip_slot_index(key[()])


def colliding_senders(port: int) -> tuple[socket.socket, socket.socket]:
    """Two UDP sockets on 127.0.0.1 whose flows to port share a slot in both directions."""
    seen: dict[tuple[int, int], int] = {}
    for sport in range(20000, 60000):
        if sport == port:
            continue
        where = (slot_of(sport, port, 1), slot_of(sport, port, 0))
        other = seen.setdefault(where, sport)
        if other == sport:
            continue
        pair = []
        try:
            for p in (other, sport):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                pair.append(s)
                s.bind(("127.0.0.1", p))
            return pair[0], pair[1]
        except OSError:  # a port in use: the next pair
            for s in pair:
                s.close()
            seen[where] = sport
    raise AssertionError("no two free ports share a slot")


def send_runs(rx: socket.socket, txs: tuple[socket.socket, socket.socket], runs: int, run: int) -> Counter[int]:
    """runs runs of run datagrams, the two senders taking turns; payload sizes vary. Returns
    the payload bytes each sender's port sent."""
    rx.settimeout(2.0)
    sent: Counter[int] = Counter()
    for i in range(runs):
        tx = txs[i % 2]
        for j in range(run):
            size = 1 + (i * run + j) % 50
            tx.sendto(b"s" * size, rx.getsockname())
            rx.recv(64)
            sent[int(tx.getsockname()[1])] += size
    return sent


@pytest.mark.matrix
def test_flows_sharing_a_slot_move_their_counts_and_each_packet_counts_once() -> None:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    port = int(rx.getsockname()[1])
    txs = colliding_senders(port)
    first, second = (int(tx.getsockname()[1]) for tx in txs)
    runs, run = 9, 4
    try:
        with one_cpu(), ip_tracing(("ip-flows",), port) as cap:
            sent = send_runs(rx, txs, runs, run)
            entries = {(int(k["sport"]), int(k["direction"])): int(v["packets"]) for k, v in cap.session.ip_flows()}
            in_slots = int(cap.session.ip_slots()["packets"].sum())
            flows = final_counters(cap)
    finally:
        rx.close()
        for tx in txs:
            tx.close()
    want = {first: runs // 2 + 1, second: runs // 2}
    got = {(f.direction, f.sport): (f.packets, f.bytes, f.packets_delta) for f in flows}
    assert got == {
        (d, p): (n * run, sent[p] + 28 * n * run, n * run) for p, n in want.items() for d in ("send", "receive")
    }
    # the slots were used (the last run is still in one) and moves carried counts into the
    # entries (each run's first packet is a miss counted there; the rest came with a move)
    assert in_slots == 2 * (run - 1)
    assert entries[(first, 1)] == entries[(first, 0)] == want[first] * run - (run - 1)
    assert entries[(second, 1)] == entries[(second, 0)] == want[second] * run
    assert not cap.of("loss_report")


def test_reads_while_flows_take_the_slot_from_each_other_never_count_twice() -> None:
    """The traffic in a child process on one CPU, the reads here on another (no GIL
    between them): moves land inside reads, and a read that used a slot whose counts had
    just moved into the entry it read would count them twice (a later delta negative)."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    port = int(rx.getsockname()[1])
    txs = colliding_senders(port)
    ports = [int(tx.getsockname()[1]) for tx in txs]
    runs, run = 3000, 5
    cpus = sorted(os.sched_getaffinity(0))
    reports = []
    try:
        with ip_tracing(("ip-flows",), port) as cap:
            ctx = multiprocessing.get_context("fork")
            done = ctx.Queue()
            worker = ctx.Process(target=traffic, args=(rx, txs, runs, run, cpus[0], done))
            worker.start()
            os.sched_setaffinity(0, {cpus[-1]})
            try:
                while worker.is_alive() and done.empty():  # read as the moves happen
                    reports.extend(final_counters(cap))
                    cap.records.clear()
                sent = done.get(timeout=60)
                worker.join(timeout=10)
            finally:
                os.sched_setaffinity(0, set(cpus))
            reports.extend(final_counters(cap))
    finally:
        rx.close()
        for tx in txs:
            tx.close()
    assert len(reports) > 4  # several reads came while the traffic ran
    assert [r for r in reports if r.packets_delta < 0 or r.bytes_delta < 0] == []
    total: Counter[tuple[str, int]] = Counter()
    size: Counter[tuple[str, int]] = Counter()
    last: dict[tuple[str, int], tuple[int, int]] = {}
    for r in reports:
        total[(r.direction, r.sport)] += r.packets_delta
        size[(r.direction, r.sport)] += r.bytes_delta
        last[(r.direction, r.sport)] = (r.packets, r.bytes)
    n = runs // 2 * run
    want = {(d, p): n for p in ports for d in ("send", "receive")}
    assert dict(total) == want
    assert {k: (total[k], size[k]) for k in want} == last  # the deltas add up to the totals
    assert {k: size[k] for k in want} == {(d, p): sent[p] + 28 * n for d, p in want}
    assert not [r for r in cap.of("loss_report") if r.hook == "map/ip_flows"]


def traffic(
    rx: socket.socket, txs: tuple[socket.socket, socket.socket], runs: int, run: int, cpu: int, done: Any
) -> None:
    os.sched_setaffinity(0, {cpu})
    done.put(dict(send_runs(rx, txs, runs, run)))


def test_a_busy_flow_in_its_slot_keeps_an_entry_when_the_lru_is_full() -> None:
    """A flow counted in its slot does not touch its LRU entry, so new flows evict it; its
    256th packet in the slot looks the entry up, finds it gone and makes a new one. The
    packets counted for the evicted entry are reported uncounted: the flow's reported
    packets and those add up to what it sent after its first packet (which the evicted
    entry held: an entry lost, reported as such)."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    port = int(rx.getsockname()[1])
    busy = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    busy.bind(("127.0.0.1", 0))
    hot = int(busy.getsockname()[1])
    taken = {slot_of(hot, port, 1), slot_of(hot, port, 0)}
    others: list[socket.socket] = []
    sent = 301
    try:
        with one_cpu(), ip_tracing(("ip-flows",), port, ip_flows_max=64) as cap:
            rx.settimeout(2.0)
            busy.sendto(b"h", rx.getsockname())
            rx.recv(64)
            for sport in range(20000, 60000):  # 150 new flows, none in the busy flow's slots: 300 entries
                if len(others) == 150:
                    break
                if sport == port or {slot_of(sport, port, 1), slot_of(sport, port, 0)} & taken:
                    continue
                tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                try:
                    tx.bind(("127.0.0.1", sport))
                except OSError:
                    tx.close()
                    continue
                others.append(tx)
                tx.sendto(b"o", rx.getsockname())
                rx.recv(64)
            for _ in range(sent - 1):
                busy.sendto(b"h", rx.getsockname())
                rx.recv(64)
            flows = final_counters(cap)
    finally:
        rx.close()
        busy.close()
        for tx in others:
            tx.close()
    mine = {f.direction: f.packets for f in flows if f.sport == hot}
    uncounted = sum(r.lost for r in cap.of("loss_report") if r.event_type == "ip_flow_packets")
    assert set(mine) == {"send", "receive"}  # without the look-up its entries would stay evicted
    assert sum(mine.values()) + uncounted == 2 * (sent - 1)
    assert 0 < uncounted

"""ip-flows (the ip provider's always-on mode): exact per-flow counters kept in the kernel,
per-flow sampling decided in the kernel, and LRU evictions reported as loss.

Real traffic on loopback, filtered on a port each test owns; compared with what the
test sent, with the ip provider's full mode and with tcpdump. Keep in sync with
kmod/ip.bpf.c (ip_flow_count), collector/bpf/source.py (ip_flow_counters).
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from collector.bpf.kallsyms import kernel_symbols
from collector.bpf.loader import Filters, KernelSession, Options
from collector.bpf.source import KernelSource, wall_offset
from tests.kernel_support import Capture, kernel
from translators.kernel import KernelEnv

pytestmark = kernel
LO_INDEX = socket.if_nametoindex("lo")


@contextmanager
def ip_tracing(
    providers: tuple[str, ...], port: int, ip_sample: int = 0, ip_flows_max: int = 16384
) -> Iterator[Capture]:
    opts = Options(
        providers=providers,
        filters=Filters(port=port),
        ringbuf_bytes=1 << 22,
        ip_sample=ip_sample,
        ip_flows_max=ip_flows_max,
    )
    env = KernelEnv(
        host_id="test-host", boot_id="test-boot", wall_offset=wall_offset(), symbolize=kernel_symbols().symbolize
    )
    with KernelSession(opts) as session:
        yield Capture(session, KernelSource(session, env, flow_interval=3600.0))


class Tap:
    """tcpdump on lo writing a pcap; counts are re-read from the file with the same filter, so
    packets libpcap took before its filter was attached (a busy lo) do not count."""

    def __init__(self, expr: str, path: str) -> None:
        self.expr, self.path, self.final = expr, path, -1

    def count(self) -> int:
        out = subprocess.run(["tcpdump", "-r", self.path, "-nn", self.expr], capture_output=True, text=True)
        return len(out.stdout.splitlines())

    def settle(self, expected: int, timeout: float = 30.0) -> None:
        """Give tcpdump (bounded) time to write what it was sent before it is stopped;
        returns as soon as it has, so only a slow machine waits long."""
        end = time.monotonic() + timeout
        while self.count() < expected and time.monotonic() < end:
            time.sleep(0.05)


@contextmanager
def tcpdump(expr: str) -> Iterator[Tap]:
    if shutil.which("tcpdump") is None:
        pytest.skip("needs tcpdump (apt-get install tcpdump)")
    fd, path = tempfile.mkstemp(suffix=".pcap")
    os.close(fd)
    # -s 96: headers only, so 64 KiB loopback skbs of other traffic, queued before the filter
    # is attached, cannot fill the capture ring and make the kernel drop ours
    cmd = ["tcpdump", "-i", "lo", "-nn", "-p", "--immediate-mode", "-U", "-s", "96", "-w", path, expr]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    tap = Tap(expr, path)
    try:
        assert proc.stderr is not None
        assert "listening on" in proc.stderr.readline()
        yield tap
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=10)
        tap.final = tap.count()
        os.unlink(path)


def udp_pair() -> tuple[socket.socket, socket.socket, int]:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.bind(("127.0.0.1", 0))
    return rx, tx, int(rx.getsockname()[1])


def exchange(rx: socket.socket, tx: socket.socket, forward: list[int], back: list[int]) -> None:
    """Datagrams of these payload sizes tx -> rx, then rx -> tx; each one read back (bounded)."""
    rx.settimeout(2.0)
    tx.settimeout(2.0)
    for size in forward:
        tx.sendto(b"f" * size, rx.getsockname())
        rx.recv(65536)
    for size in back:
        rx.sendto(b"b" * size, tx.getsockname())
        tx.recv(65536)


def final_counters(cap: Capture) -> list:
    cap.records.extend(cap.source.poll(timeout=0.05, final=True))
    return cap.of("ip_flow_counters")


@pytest.mark.matrix
def test_exact_counters_equal_what_was_sent_the_full_mode_and_tcpdump() -> None:
    rx, tx, port = udp_pair()
    sport = int(tx.getsockname()[1])
    forward = [10 + i for i in range(40)]
    back = [100 + 3 * i for i in range(15)]
    try:
        with tcpdump(f"udp and port {port}") as tap, ip_tracing(("ip", "ip-flows"), port) as cap:
            exchange(rx, tx, forward, back)
            cap.wait_for(lambda rs: len([r for r in rs if r.kind == "ip_packet"]) >= 2 * (len(forward) + len(back)))
            flows = final_counters(cap)
            tap.settle(len(forward) + len(back))
    finally:
        rx.close()
        tx.close()

    fwd = ("127.0.0.1", sport, "127.0.0.1", port)
    rev = ("127.0.0.1", port, "127.0.0.1", sport)
    got = {
        (f.direction, (f.src, f.sport, f.dst, f.dport)): (f.packets, f.bytes, f.packets_delta, f.bytes_delta)
        for f in flows
    }
    want_fwd = (len(forward), sum(forward) + 28 * len(forward))
    want_rev = (len(back), sum(back) + 28 * len(back))
    assert got == {
        ("send", fwd): want_fwd * 2,
        ("receive", fwd): want_fwd * 2,
        ("send", rev): want_rev * 2,
        ("receive", rev): want_rev * 2,
    }
    assert {(f.if_index, f.protocol, f.protocol_name, f.ip_ver, f.samples, f.sampling) for f in flows} == {
        (LO_INDEX, 17, "UDP", 4, 0, None)
    }
    # the full mode's records of the same packets, in the same session
    full: Counter[tuple[str, tuple[object, ...]]] = Counter()
    full_bytes: Counter[tuple[str, tuple[object, ...]]] = Counter()
    for p in cap.of("ip_packet"):
        key = (p.probe, (p.src, p.sport, p.dst, p.dport))
        full[key] += 1
        full_bytes[key] += p.length
    assert {k: (full[k], full_bytes[k]) for k in full} == {k: v[:2] for k, v in got.items()}
    # libpcap keeps each loopback packet once (leaving): our send hook's count
    assert tap.final == sum(f.packets for f in flows if f.direction == "send") == len(forward) + len(back)
    assert not cap.of("loss_report")


def test_sampling_emits_exactly_one_packet_in_n_of_each_flow() -> None:
    rx, tx, port = udp_pair()
    tx2 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx2.bind(("127.0.0.1", 0))
    s1, s2 = int(tx.getsockname()[1]), int(tx2.getsockname()[1])
    try:
        with ip_tracing(("ip-flows",), port, ip_sample=7) as cap:
            exchange(rx, tx, [20] * 50, [])
            exchange(rx, tx2, [30] * 23, [])
            want = 2 * (math.ceil(50 / 7) + math.ceil(23 / 7))
            cap.wait_for(lambda rs: len([r for r in rs if r.kind == "ip_packet"]) >= want)
            flows = final_counters(cap)
        samples = Counter((p.probe, p.sport) for p in cap.of("ip_packet"))
    finally:
        rx.close()
        tx.close()
        tx2.close()
    assert samples == {("send", s1): 8, ("receive", s1): 8, ("send", s2): 4, ("receive", s2): 4}
    assert {(f.direction, f.sport, f.packets, f.samples, f.sampling) for f in flows} == {
        ("send", s1, 50, 8, 7),
        ("receive", s1, 50, 8, 7),
        ("send", s2, 23, 4, 7),
        ("receive", s2, 23, 4, 7),
    }


def test_a_second_report_carries_only_the_new_packets() -> None:
    rx, tx, port = udp_pair()
    try:
        with ip_tracing(("ip-flows",), port) as cap:
            exchange(rx, tx, [5] * 4, [])
            first = final_counters(cap)
            cap.records.clear()
            exchange(rx, tx, [9] * 3, [])
            second = final_counters(cap)
            cap.records.clear()
            third = final_counters(cap)
    finally:
        rx.close()
        tx.close()
    assert sorted((f.direction, f.packets, f.bytes, f.packets_delta, f.bytes_delta) for f in first) == [
        ("receive", 4, 132, 4, 132),
        ("send", 4, 132, 4, 132),
    ]
    assert sorted((f.direction, f.packets, f.bytes, f.packets_delta, f.bytes_delta) for f in second) == [
        ("receive", 7, 243, 3, 111),
        ("send", 7, 243, 3, 111),
    ]
    assert third == []  # nothing moved: nothing reported


def test_map_evictions_are_reported_as_loss() -> None:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    port = int(rx.getsockname()[1])
    senders = 300
    txs: list[socket.socket] = []
    try:
        with ip_tracing(("ip-flows",), port, ip_flows_max=64) as cap:
            rx.settimeout(2.0)
            for _ in range(senders):  # one datagram from each of 300 ports: 600 entries (send + receive)
                txs.append(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))  # kept open: no port reused
                txs[-1].sendto(b"x", rx.getsockname())
                rx.recv(64)
            flows = final_counters(cap)
    finally:
        rx.close()
        for tx in txs:
            tx.close()
    losses = [r for r in cap.of("loss_report") if r.event_type == "ip_flow_counters"]
    assert len(losses) == 1
    loss = losses[0]
    assert (loss.provider, loss.probe, loss.hook) == ("nettrail", "evicted", "map/ip_flows")
    # a packet whose new entry the LRU could not make (or evicted at once) is reported uncounted
    uncounted = sum(r.lost for r in cap.of("loss_report") if r.event_type == "ip_flow_packets")
    assert loss.received_total + uncounted == 2 * senders  # each packet made one entry or was reported
    assert 0 < len(flows) <= 64
    assert loss.lost == loss.lost_total == loss.received_total - len(flows)  # every entry is reported or lost
    assert {(f.packets, f.bytes) for f in flows} == {(1, 29)}


def test_tcp_over_ipv6_counts_match_the_full_mode_and_tcpdump_big_tcp_included() -> None:
    """A 300 kB transfer on ::1: loopback sends skbs over 64 KiB (BIG TCP, a hop-by-hop
    header first, which the kernel steps over for the ports) that are segmented after
    net_dev_queue, so the send side counts skbs and the receive side (and the tap) packets."""
    srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    srv.bind(("::1", 0))
    srv.listen(1)
    port = int(srv.getsockname()[1])
    payload = b"z" * 300_000
    try:
        with tcpdump(f"tcp and port {port}") as tap, ip_tracing(("ip", "ip-flows"), port) as cap:
            cli = socket.create_connection(("::1", port), timeout=5)
            conn, _ = srv.accept()
            cli.sendall(payload)
            cli.shutdown(socket.SHUT_WR)
            got = 0
            conn.settimeout(5)
            while chunk := conn.recv(1 << 16):  # bounded by the peer's FIN
                got += len(chunk)
            conn.close()
            cli.close()
            cap.settle(quiet=0.5)  # the last ACKs and their records
            flows = final_counters(cap)
            tap.settle(sum(f.packets for f in flows if f.direction == "receive"))
    finally:
        srv.close()
    assert got == len(payload)
    full: Counter[tuple[str, tuple[object, ...]]] = Counter()
    full_bytes: Counter[tuple[str, tuple[object, ...]]] = Counter()
    for p in cap.of("ip_packet"):
        full[(p.probe, (p.src, p.sport, p.dst, p.dport))] += 1
        full_bytes[(p.probe, (p.src, p.sport, p.dst, p.dport))] += p.length
    packets = {(f.direction, (f.src, f.sport, f.dst, f.dport)): f.packets for f in flows}
    assert len(packets) == 4 and {(f.ip_ver, f.protocol_name) for f in flows} == {(6, "TCP")}
    assert packets == dict(full)  # every skb the full mode recorded, and no other
    received = {k: f.bytes for f in flows if (k := (f.direction, (f.src, f.sport, f.dst, f.dport)))[0] == "receive"}
    assert received == {k: full_bytes[k] for k in received}  # no skb over 64 KiB arrives: lengths are exact
    # the tap sees each packet after segmentation, as the receive hook does
    assert tap.final == sum(f.packets for f in flows if f.direction == "receive")
    data_out = next(f for f in flows if f.direction == "send" and f.dport == port)
    data_in = next(f for f in flows if f.direction == "receive" and f.dport == port)
    assert data_in.bytes - len(payload) > 0 and data_out.bytes - len(payload) > 0
    assert data_in.packets >= data_out.packets  # BIG TCP skbs (where the kernel sends them) split after the hook
    assert not cap.of("loss_report")


def test_an_entrys_times_span_its_first_to_its_last_packet_to_a_jiffy() -> None:
    """start_ts_ns is the first packet's exact kernel time, end_ts_ns the last packet's to
    a jiffy (the kernel adds whole jiffies, not a clock read, per packet)."""
    rx, tx, port = udp_pair()
    try:
        with ip_tracing(("ip-flows",), port) as cap:
            before = time.monotonic_ns()  # CLOCK_MONOTONIC, the kernel's ktime
            exchange(rx, tx, [5], [])
            time.sleep(0.5)
            exchange(rx, tx, [5], [])
            after = time.monotonic_ns()
            flows = final_counters(cap)
    finally:
        rx.close()
        tx.close()
    jiffy = 10_000_000  # at most 10 ms (CONFIG_HZ >= 100)
    [send] = [f for f in flows if f.direction == "send"]
    assert send.packets == 2
    assert before <= send.start_ts_ns <= after - 500_000_000
    assert 500_000_000 - jiffy <= send.end_ts_ns - send.start_ts_ns <= after - before + jiffy

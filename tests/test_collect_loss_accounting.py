"""Kernel tests: events received + lost = events generated, exactly, whether nobody reads
the ring (a storm into one page) or the collector reads it while a bulk transfer fills it;
program runs the kernel skipped are reported as the kernel counts them.

These tests assert the accounting, never how fast the collector drains: that depends on
the machine and on what else runs there, and is a benchmark figure (bench/bench_collect.py,
docs/benchmarks.md "Kernel collector overhead": its collector totals and drain capacity)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from collector.bpf import layout
from tests.collect_process import Collector
from tests.kernel_support import bound_listener, cookie_of, free_port, kernel, tracing
from translators.records import LossReport, from_json

pytestmark = kernel
NEEDS_IPERF3 = pytest.mark.skipif(shutil.which("iperf3") is None, reason="needs iperf3 (apt-get install iperf3)")


@contextmanager
def iperf3_server(port: int) -> Iterator[None]:
    """`iperf3 -s -1` (one test, then it exits), entered once it listens; killed by its PID
    if a failure leaves it waiting."""
    server = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True).stdout.strip():
            assert time.monotonic() < deadline and server.poll() is None, "iperf3 -s did not listen"
            time.sleep(0.05)
        yield
        server.wait(timeout=10)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def kernel_recursion_misses(prog_id: int) -> int:
    out = subprocess.run(["bpftool", "-j", "prog", "show", "id", str(prog_id)], capture_output=True, text=True)
    return int(json.loads(out.stdout).get("recursion_misses", 0))  # bpftool leaves it out at 0


def test_a_storm_into_a_one_page_ring_loses_events_and_the_counts_add_up() -> None:
    lst = bound_listener()
    port = lst.getsockname()[1]
    with tracing(("tcp", "siftr"), ringbuf=4096, port=port) as cap:
        lst.listen()
        client = socket.create_connection(("127.0.0.1", port))
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        server, _ = lst.accept()
        for _ in range(300):  # nobody reads the ring meanwhile: ~600 samples for ~14 slots
            client.sendall(b"m" * 100)
            server.recv(100)
        client.close()
        server.close()
        lst.close()
        records = cap.settle(quiet=0.5)
        counters = cap.session.counters().sum(axis=0)  # read after the drain: nothing is in flight
        source = cap.source

    generated, lost = counters[0], counters[1]
    received = source.received
    assert lost.sum() > 0 and received.sum() > 0
    assert (received + lost == generated).all(), (received, lost, generated)
    reports = [r for r in records if isinstance(r, LossReport)]
    siftr = [r for r in reports if r.event_type == "siftr_sample"]
    assert siftr and siftr[-1].lost_total == lost[6]
    assert sum(r.lost for r in siftr) == lost[6]
    assert siftr[-1].per_cpu is not None and sum(siftr[-1].per_cpu) == lost[6]
    assert source.totals.summary().startswith(f"events received {received.sum()}, lost {lost.sum()}")


@pytest.mark.slow
@NEEDS_IPERF3
def test_received_plus_lost_is_generated_while_the_collector_reads_a_bulk_storm() -> None:
    """A loopback iperf3 transfer at ppl=1 (tens of thousands of events a second) into a
    256 KiB ring, read while it fills, as `nettrail collect` reads it. Reading starts only
    once the programs have generated twice what the ring holds, so some events are lost on
    any machine, idle or busy, however fast the reader: the loss counters are part of what
    is checked. However the events split between received and lost, each one generated is
    either read exactly once or counted lost exactly once, per event type."""
    port = free_port()
    ring = 1 << 18
    capacity = ring // ((layout.EVENT_SIZE + 8 + 7) & ~7)  # records of struct nt_event + header
    with iperf3_server(port), tracing(("tcp", "siftr"), ringbuf=ring, port=port) as cap:
        client = subprocess.Popen(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "3"], stdout=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while int(cap.session.counters()[:, 0, :].sum()) < 2 * capacity:  # generated, nothing read yet
                assert time.monotonic() < deadline and client.poll() is None, "iperf3 made too few events"
                time.sleep(0.01)
            while client.poll() is None:  # read while the transfer fills the ring
                cap.drain()
            assert client.wait() == 0
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
        cap.session.detach()  # no event after this one: what is generated is final
        cap.settle(quiet=0.5)
        counters = cap.session.counters().sum(axis=0)  # read after the drain: nothing is in flight
        received = cap.source.received.copy()

    generated, lost = counters[0], counters[1]
    assert generated.sum() >= 2 * capacity and lost.sum() > 0 and received.sum() > 0
    assert (received + lost == generated).all(), (received, lost, generated)
    assert received[6] > 0 and lost[6] > 0  # siftr_sample, the bulk of the storm


@pytest.mark.slow
@NEEDS_IPERF3
def test_program_runs_the_kernel_skipped_are_reported_as_the_kernel_counts_them(tmp_path: Path) -> None:
    """Four parallel loopback streams: a softirq handling one stream's segments interrupts
    tcp_probe while it runs for another's (backlog processing in process context), and the
    kernel drops that nested run. The collector reports those runs per program, as many as
    the kernel's own bpf_prog_info.recursion_misses says."""
    port = free_port()
    out = tmp_path / "o.jsonl"
    with Collector("--providers", "tcp,siftr", "--filter", f"port={port}", "--out", str(out)) as col:
        prog_id = col.wait_attached(timeout=60)["tcp_probe"]
        for _ in range(5):  # nesting is up to the interrupts' timing: a few hundred a run as a rule
            with iperf3_server(port):
                client = ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "2", "-P", "4"]
                subprocess.run(client, check=True, stdout=subprocess.DEVNULL, timeout=60)
            if kernel_recursion_misses(prog_id) > 0:
                break
        time.sleep(1.5)  # a loss report (once a second) after the last skipped run
        skipped = kernel_recursion_misses(prog_id)
        code, _, err = col.stop(timeout=60)
    assert code == 0 and skipped > 0, err
    assert f"program runs the kernel skipped {skipped} (tcp_probe {skipped})" in err
    reports = [r for r in (from_json(line) for line in out.read_bytes().splitlines()) if isinstance(r, LossReport)]
    runs = [r for r in reports if r.probe == "skipped"]
    assert {(r.event_type, r.hook) for r in runs} == {("tcp_probe runs", "prog/tcp_probe")}
    assert sum(r.lost for r in runs) == runs[-1].lost_total == skipped


def test_when_samples_fill_the_ring_the_connections_state_changes_and_final_counters_still_arrive() -> None:
    """Nobody reads a 256 KiB ring while a transfer at ppl=1 makes far more siftr samples
    than it holds, then five short connections open and close: the samples stop at three
    quarters of the ring (lost, counted), and every state change, destroy and final flow
    counter of the five connections is received, none lost."""
    lst = bound_listener()
    port = lst.getsockname()[1]
    ring = 1 << 18
    capacity = ring // ((layout.EVENT_SIZE + 8 + 7) & ~7)
    with tracing(("tcp", "siftr"), ringbuf=ring, port=port) as cap:
        lst.listen(8)
        bulk = socket.create_connection(("127.0.0.1", port))
        bulk.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer, _ = lst.accept()
        for _ in range(4 * capacity):  # nobody reads the ring meanwhile
            bulk.sendall(b"s" * 100)
            peer.recv(100)
        assert int(cap.session.counters()[:, 1, 6].sum()) > 0  # siftr samples already lost
        cookies = []
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", port)) as client:
                server, _ = lst.accept()
                cookies.append(cookie_of(client))
                client.sendall(b"c" * 500)
                assert len(server.recv(1000)) == 500
                server.close()
        records = cap.wait_for(
            lambda recs: sum(1 for r in recs if r.kind == "connection" and r.sock_cookie in cookies) == 5, timeout=10
        )
        counters = cap.session.counters().sum(axis=0)
        received = cap.source.received.copy()
    for s in (bulk, peer, lst):
        s.close()

    generated, lost = counters[0], counters[1]
    assert lost[6] > 0 and (received + lost == generated).all(), (received, lost, generated)
    assert lost.sum() == lost[6], lost  # only siftr samples were lost
    for cookie in cookies:
        mine = [r for r in records if r.sock_cookie == cookie]
        states = [(r.prev_state, r.state) for r in mine if r.kind == "tcp_state"]  # type: ignore[attr-defined]
        assert states == [
            ("CLOSED", "SYN_SENT"),
            ("SYN_SENT", "ESTABLISHED"),
            ("ESTABLISHED", "CLOSE_WAIT"),  # the server closes first
            ("CLOSE_WAIT", "LAST_ACK"),
            ("LAST_ACK", "CLOSED"),
        ], states
        assert [r.kind for r in mine if r.kind in ("connection", "flow_counters")].count("connection") == 1
        [final] = [r for r in mine if r.kind == "flow_counters"]
        assert final.bytes_out == 500  # type: ignore[attr-defined]


def test_a_ring_half_full_of_a_bulk_transfers_samples_still_takes_a_slow_flows_samples() -> None:
    """Nobody reads a 256 KiB ring while a transfer at ppl=1 fills it past half and goes on;
    then a second connection sends one small message every 30 ms. Once the ring is half
    full a flow gets at most one sample every 10 ms, so the bulk transfer's samples give
    way (lost, counted) and the slow connection's first sample of each message is
    received (without the rule the bulk fills the ring to three quarters first)."""
    lst = bound_listener()
    port = lst.getsockname()[1]
    ring = 1 << 18
    capacity = ring // ((layout.EVENT_SIZE + 8 + 7) & ~7)
    messages = 5
    with tracing(("tcp", "siftr"), ringbuf=ring, port=port) as cap:
        lst.listen(8)
        bulk = socket.create_connection(("127.0.0.1", port))
        bulk.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer, _ = lst.accept()
        slow = socket.create_connection(("127.0.0.1", port))
        slow_peer, _ = lst.accept()

        def exchange(times: int) -> None:
            for _ in range(times):
                bulk.sendall(b"s" * 100)
                peer.recv(100)

        # Nobody reads the ring meanwhile. Until it is half full (every sample so far in
        # it), then 150 exchanges more: several hundred samples, which would fill it to
        # three quarters, where every sample is refused; under pressure the bulk flows
        # get one each per 10 ms, a few in the time the exchanges take.
        for _ in range(capacity):
            if int(cap.session.counters()[:, 0, 6].sum()) > capacity // 2:
                break
            exchange(10)
        exchange(150)
        for _ in range(messages):
            time.sleep(0.03)
            slow.sendall(b"t" * 10)
            assert slow_peer.recv(100) == b"t" * 10
        slow_cookie = cookie_of(slow)
        records = cap.settle(quiet=0.5)
        counters = cap.session.counters().sum(axis=0)
        received = cap.source.received.copy()
    for s in (bulk, peer, slow, slow_peer, lst):
        s.close()

    generated, lost = counters[0], counters[1]
    assert lost[6] > 0 and (received + lost == generated).all(), (received, lost, generated)
    sends = [r for r in records if r.kind == "siftr_sample" and r.sock_cookie == slow_cookie and r.data_sz]  # type: ignore[attr-defined]
    assert len(sends) == messages, [(r.ts_ns, r.data_sz) for r in sends]  # type: ignore[attr-defined]

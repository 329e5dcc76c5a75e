"""Kernel tests: under a storm into a tiny ring buffer, events received + lost = events
generated; a collector that keeps up with a bulk transfer loses nothing; program runs the
kernel skipped are reported as the kernel counts them."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.collect_process import Collector
from tests.kernel_support import bound_listener, free_port, kernel, tracing
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
        records = cap.wait_for(lambda recs: False, timeout=0.5)
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
def test_a_collector_that_keeps_up_with_a_bulk_storm_loses_nothing(tmp_path: Path) -> None:
    """At ppl=1 a loopback iperf3 transfer makes ~70,000 events/s; `nettrail collect` drains
    the default 16 MiB ring far faster, so no reservation may fail. Those that did (a few
    dozen a run) came from the reader storing its consumer position a byte at a time: the
    kernel could read a torn value far behind and find the ring full."""
    port = free_port()
    out = tmp_path / "o.jsonl"
    with (
        iperf3_server(port),
        Collector("--providers", "tcp,siftr", "--filter", f"port={port}", "--out", str(out)) as col,
    ):
        col.wait_attached(timeout=60)
        client = ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "3"]
        subprocess.run(client, check=True, stdout=subprocess.DEVNULL, timeout=60)
        code, _, err = col.stop(timeout=60)
    found = re.search(r"events received (\d+), lost (\d+)", err)
    assert code == 0 and found, err
    received, lost = int(found.group(1)), int(found.group(2))
    assert received > 50_000 and lost == 0, err


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

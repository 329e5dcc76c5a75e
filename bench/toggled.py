"""Throughput with nettrail's programs attached and detached in turn inside one transfer.

Separate runs are seconds to minutes apart, and this VM's loopback throughput drifts by
more than the 3% to be measured over that time. Phases of one iperf3 transfer share the
drift: one session is loaded, its programs attach for a phase and detach for the next
(untraced, traced, untraced, ..., untraced), and a thread drains the ring (raw batches,
no translation: user space runs on the other CPU) meanwhile. iperf3 reports every
second; a phase's first second, in which the switch falls, is left out.

Also the pinning every kernel benchmark shares (bench_collect, bench_collect_decode,
bench_skb_sample, bench/cpu_cost.py): traffic on one CPU, the tracer's user space on the
other, kept awake by a spinner.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from collector.bpf.loader import KernelSession, Options

PHASE = 3  # seconds: the switch's second, then two clean ones
# iperf3's client and server share one CPU, the tracer's user space gets the other: the
# comparison then measures what tracing adds to the traffic's CPU, not how two busy
# processes happen to be scheduled on a 2-CPU machine (which swamps everything else).
TRAFFIC_CPU, TRACER_CPU = "1", "0"


@contextmanager
def on_cpu(cpu: str) -> Iterator[None]:
    """This process (and the threads it starts meanwhile) on one CPU for the block."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {int(cpu)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@contextmanager
def cpu_kept_awake(cpu: str) -> Iterator[None]:
    """A nice-19 spinner on the tracer's CPU. On this VM an idle vCPU halts and waking it
    costs so much that loopback throughput doubles whenever the other CPU is busy; the
    spinner keeps that CPU equally awake for every contender and yields to the tracer."""
    spin = subprocess.Popen(["nice", "-n", "19", "taskset", "-c", cpu, sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spin.kill()
        spin.wait()


def pinned_toggled(opts: Options, cycles: int, port: int) -> list[float]:
    """toggled() with the draining thread on the tracer's CPU (kept awake) and the traffic on the other."""
    with on_cpu(TRACER_CPU), cpu_kept_awake(TRACER_CPU):
        return toggled(opts, cycles, port, TRAFFIC_CPU)


def toggled(opts: Options, cycles: int, port: int, traffic_cpu: str) -> list[float]:
    """One ratio per traced phase: its throughput over the mean of the untraced phases
    either side of it (each phase's clean seconds averaged)."""
    phases = 2 * cycles + 1
    with KernelSession(opts) as session:
        session.detach()  # the first phase is untraced
        stop = threading.Event()
        drainer = threading.Thread(target=drain, args=(session, stop), daemon=True)
        drainer.start()
        server = subprocess.Popen(
            ["taskset", "-c", traffic_cpu, "iperf3", "-s", "-1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(0.5)  # the server's socket
            client = subprocess.Popen(
                ["taskset", "-c", traffic_cpu, "iperf3", "-c", "127.0.0.1", "-p", str(port)]
                + ["-t", str(phases * PHASE), "-i", "1", "-J"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            start = time.monotonic()
            for phase in range(1, phases):
                # the switch early in the phase's first second, never in a second that counts
                time.sleep(max(0.0, start + phase * PHASE + 0.2 - time.monotonic()))
                if phase % 2:
                    session.attach_programs()
                else:
                    session.detach()
            out, err = client.communicate(timeout=phases * PHASE + 60)
            if client.returncode:
                raise RuntimeError(f"iperf3 client failed ({client.returncode}): {err.strip() or out.strip()}")
        finally:
            stop.set()
            drainer.join()
            server.kill()
            server.wait()
    seconds = [i["sum"]["bits_per_second"] for i in json.loads(out)["intervals"]]
    means = [sum(seconds[p * PHASE + 1 : (p + 1) * PHASE]) / (PHASE - 1) for p in range(phases)]
    return [means[p] / ((means[p - 1] + means[p + 1]) / 2) for p in range(1, phases, 2)]


def drain(session: KernelSession, stop: threading.Event) -> None:
    reader = session.reader
    assert reader is not None
    while not stop.is_set():
        reader.wait(0.1)
        while reader.read().size:
            pass


def ratio_rows(ratios: dict[str, list[float]]) -> list[str]:
    """One Markdown table row per contender: median ratio, quartiles, min - max."""
    rows = []
    for name, r in ratios.items():
        q = statistics.quantiles(r, n=4)
        rows.append(f"| {name} | {statistics.median(r):.3f} | {q[0]:.3f} – {q[2]:.3f} | {min(r):.3f} – {max(r):.3f} |")
    return rows

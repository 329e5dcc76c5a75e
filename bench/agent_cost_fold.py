"""`bench/bench_agent_cost.py --fold-compare`: the agent's whole cost per short connection
with `nettrail up`'s default set streamed and with `--tcp-fold`, in the same run: one
collector after the other, each measured as bench_agent_cost.py measures (its CPU above
idle plus its programs' run_time_ns), beside untraced runs before and after. Then, under
each, a long storm at the issue's rate (10,000 connections per second for --storm-s
seconds, as fast as the load makes them): the ring's events generated and lost over it
(the kernel's counters) and the collector's own totals at its end (events received +
lost = generated over its whole life, other traffic on the host included).
Writes its section of docs/benchmarks.md. Keep in sync with bench/bench_agent_cost.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import re
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench_agent_cost import (
    LOAD_C,
    CollectorProcess,
    RingCounters,
    Workload,
    measure_idle,
    run_load,
    settle,
    table,
    traced_run,
    workloads,
)
from doc_section import write_section

SECTION = "## Folded against streamed (`bench/bench_agent_cost.py --fold-compare`)"
MODES = (("streamed", ()), ("folded", ("--tcp-fold",)))
STORM_RATE = 10_000  # connections per second the issue asks the storm to run at
SUMMARY = re.compile(r"events received (\d+), lost (\d+).*generated (\d+)")


@dataclass
class Storm:
    conns: int
    elapsed: float
    generated: int  # ring events over the storm and its settling (kernel counters)
    lost: int
    received_total: int  # the collector's totals at its end (its whole life)
    lost_total: int
    generated_total: int


@dataclass
class Mode:
    name: str
    args: list[str]
    ws: list[Workload]
    idle: tuple[float, float]
    storm: Storm
    summary: str
    records_bytes: int


def long_storm(binary: Path, c: CollectorProcess, ring: RingCounters, idle: tuple[float, float], n: int) -> Storm:
    before = ring.read()
    elapsed, _ = run_load(binary, Workload("long storm", ["storm", str(n), "4"], n, "connection", "connections/s"))
    settle(c, idle[0])
    after = ring.read()
    return Storm(n, elapsed, after[0] - before[0], after[1] - before[1], 0, 0, 0)


def main(args: argparse.Namespace) -> int:
    loads = [os.getloadavg()]
    base = workloads(args.conns, args.burst, args.gigabytes, args.pairs)[:2]  # the storms
    modes: list[Mode] = []
    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(tmp) / "agent_cost_load"
        subprocess.run(["gcc", "-O2", "-pthread", "-o", str(binary), str(LOAD_C)], check=True)
        for _ in range(args.reps):
            for w in base:
                w.untraced.append(run_load(binary, w))
        for name, extra in MODES:
            ws = [dataclasses.replace(w, traced=[], agent=[], programs=[], events=[]) for w in base]  # untraced shared
            out = Path(tmp) / f"{name}.msgpack"
            c = CollectorProcess(out, extra)
            try:
                c.wait_attached()
                ring = RingCounters(c.ids)
                time.sleep(2.0)
                idle = measure_idle(c)
                for _ in range(args.reps):
                    for w in ws:
                        traced_run(binary, c, w, idle, ring)
                        loads.append(os.getloadavg())
                storm = long_storm(binary, c, ring, idle, int(STORM_RATE * args.storm_s))
                loads.append(os.getloadavg())
                ring.close()
            finally:
                err = c.stop()
            lines = err.strip().splitlines()
            summary = lines[-1] if lines else ""
            found = SUMMARY.search(summary)
            if found:
                storm.received_total, storm.lost_total, storm.generated_total = (int(x) for x in found.groups())
            modes.append(Mode(name, c.args, ws, idle, storm, summary, out.stat().st_size))
            out.unlink()
        for _ in range(args.reps):
            for w in base:
                w.untraced.append(run_load(binary, w))
    loads.append(os.getloadavg())
    body = section(modes, loads)
    print("\n".join(body))
    if not args.no_docs:
        write_section(SECTION, body)
    return 0


def whole(w: Workload) -> float:
    """The agent's whole cost per unit, µs (median over the runs)."""
    return statistics.median((a + p) / w.units * 1e6 for a, p in zip(w.agent, w.programs, strict=True))


def section(modes: list[Mode], loads: list[tuple[float, float, float]]) -> list[str]:
    one = [x[0] for x in loads]
    streamed, folded = modes
    out = [
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.node()}: {os.cpu_count()} CPUs, Linux "
        f"{platform.release()}, load average (1 min) {min(one):.1f}–{max(one):.1f} during the run (other engineers' "
        "tests and benchmarks on the same machine; the collector traces the whole host, so their traffic is in its "
        'cost too). Measured as in "The agent\'s whole cost", one collector after the other: '
        f"`nettrail collect {' '.join(streamed.args[:-2])}` and the same with `--tcp-fold` (window 1 s).",
        "",
    ]
    for m in modes:
        out += [f"**{m.name}** (idle: {m.idle[0]:.2%} of one CPU, programs {m.idle[1]:.3%}):", "", *table(m.ws), ""]
    ratios = [
        whole(f) / whole(s) if whole(s) > 0 else float("nan") for s, f in zip(streamed.ws, folded.ws, strict=True)
    ]
    out += [
        "Per short connection, whole cost folded / streamed: "
        + ", ".join(f"{w.name} {r:.2f}" for w, r in zip(streamed.ws, ratios, strict=True))
        + ".",
        "",
        f"**The long storm** ({STORM_RATE:,} connections per second asked for the seconds given, the default 4 MiB ring; "
        "received + lost = generated is the collector's own totals over its whole life):",
        "",
        "| mode | connections | seconds | rate made | ring events generated | lost | collector: received + lost = "
        "generated | its summary |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in modes:
        s = m.storm
        holds = s.received_total + s.lost_total == s.generated_total
        out.append(
            f"| {m.name} | {s.conns:,} | {s.elapsed:.1f} | {s.conns / s.elapsed:,.0f}/s | {s.generated:,} | "
            f"{s.lost:,} ({s.lost / max(s.generated, 1):.1%}) | {'yes' if holds else 'no'} | `{m.summary}` |"
        )
    out += ["", "Msgpack written: " + ", ".join(f"{m.name} {m.records_bytes / 1e6:,.1f} MB" for m in modes) + "."]
    return out

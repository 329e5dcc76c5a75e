"""Benchmark: how many kernel events/s one CPU turns into records and writes (tcp+siftr, ppl=1).

Real events: loopback iperf3 traffic (small segments, TCP_NODELAY, so every packet is a
SIFTR sample each way) fills a large ring buffer that nobody reads, with the kernel's
counters proving none was lost. The ring is then drained on one CPU (the bare drain, the
peer), and the same batches go through the collector's path: translate + number
(KernelSource, a null sink), then into the JSONL and the msgpack file sinks. Rates are
events (and records) over the process CPU time of drain + that path; ratios are to the
bare drain measured in the same run. Several repetitions over the same batches, medians.
Writes docs/benchmarks.md ("## Collector decode rate"). Needs root.
Keep in sync with: collector/bpf/source.py, collector/sinks/file.py, bench/bench_collect.py.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_collect  # noqa: E402
from doc_section import write_section  # noqa: E402
from toggled import TRACER_CPU, TRAFFIC_CPU, on_cpu  # noqa: E402

from collector.bpf.loader import Filters, KernelSession, Options  # noqa: E402
from collector.bpf.source import KernelSource, wall_offset  # noqa: E402
from collector.sinks.file import FileSink  # noqa: E402
from translators.kernel import KernelEnv  # noqa: E402

SECTION = "## Collector decode rate"
PORT = 52019  # not bench_collect's port: the two may run at the same time
TARGET = 200_000


def fill(
    seconds: float, ring: int, write_len: int, providers: tuple[str, ...] = ("tcp", "siftr")
) -> tuple[list[np.ndarray], float, int, int]:
    """(batches, CPU seconds of the bare drain, lost, generated) of `seconds` of traffic."""
    opts = Options(providers=providers, ppl=1, filters=Filters(port=PORT), ringbuf_bytes=ring)
    with KernelSession(opts) as session:
        saved, bench_collect.PORT = bench_collect.PORT, PORT
        try:
            bench_collect.iperf(seconds, ("-N", "-l", str(write_len)) if write_len else ())
        finally:
            bench_collect.PORT = saved
        session.detach()
        reader = session.reader
        assert reader is not None
        batches: list[np.ndarray] = []
        start = time.process_time()
        while (batch := reader.read()).size:
            batches.append(batch)
        drained = time.process_time() - start
        counters = session.counters().sum(axis=0)
        lost, generated = int(counters[1].sum()), int(counters[0].sum())
        return batches, drained, lost, generated


def live(seconds: float, path: Path) -> tuple[int, int, int, float, float, float]:
    """The collector's own loop (KernelSource.poll -> JSONL FileSink) on this CPU while bulk
    iperf3 runs on the traffic CPU, default ring size: (received, lost, generated, wall s,
    CPU s, peak ring fill as a fraction)."""
    opts = Options(providers=("tcp", "siftr"), ppl=1, filters=Filters(port=PORT))
    with KernelSession(opts) as session:
        env = KernelEnv(host_id="bench", boot_id="bench", wall_offset=wall_offset(), wire=True)
        source = KernelSource(session, env, flow_interval=1.0)
        sink = FileSink(path)
        saved, bench_collect.PORT = bench_collect.PORT, PORT
        traffic = threading.Thread(target=bench_collect.iperf, args=(seconds,))
        try:
            wall, cpu = time.monotonic(), time.process_time()
            traffic.start()
            reader = session.reader
            assert reader is not None
            peak = 0  # ring backlog (bytes) seen before a poll: how close the ring came to full
            while traffic.is_alive():
                peak = max(peak, reader.pending())
                sink.write(source.poll(0.05))
            session.detach()
            sink.write(source.poll(final=True))
            wall, cpu = time.monotonic() - wall, time.process_time() - cpu
        finally:
            traffic.join()
            bench_collect.PORT = saved
            sink.close()
        totals = source.totals
        return (
            sum(totals.received.values()),
            sum(totals.lost.values()),
            sum(totals.generated.values()),
            wall,
            cpu,
            peak / opts.ringbuf_bytes,
        )


def run_path(
    session: KernelSession, batches: list[np.ndarray], sink: Callable[[list], None] | None
) -> tuple[float, int]:
    """(CPU seconds, records) of translate + number (+ sink) over the batches."""
    env = KernelEnv(host_id="bench", boot_id="bench", wall_offset=wall_offset(), wire=True)  # as collect does
    source = KernelSource(session, env, flow_interval=3600)
    records = 0
    start = time.process_time()
    for batch in batches:
        recs = source.number(source.translate(batch))
        if sink is not None:
            sink(recs)
        records += len(recs)
    return time.process_time() - start, records


def measure(args: argparse.Namespace) -> tuple[list[str], float]:
    with on_cpu(TRACER_CPU):
        batches, drain_s, lost, generated = fill(args.fill_seconds, args.ring, args.write_len, args.providers)
    events = sum(len(b) for b in batches)
    if args.save:
        np.save(args.save, np.concatenate(batches))
    # the session object is only a holder here: translate() reads batches, not maps
    session = KernelSession(Options(providers=args.providers))
    tmp = Path(tempfile.mkdtemp())
    sinks: dict[str, Callable[[], tuple[Callable[[list], None] | None, Callable[[], None]]]] = {
        "null sink (translate + number)": lambda: (None, lambda: None),
        "JSONL file sink": lambda: _file_sink(tmp / "r.jsonl"),
        "msgpack file sink": lambda: _file_sink(tmp / "r.msgpack"),
    }
    rows = [f"| bare drain (peer: mmap reader, batches copied out) | {events / drain_s:,.0f} | — | 1.00 |"]
    best_jsonl = 0.0
    try:
        with on_cpu(TRACER_CPU):  # the sinks, then the live loop beside the traffic's CPU
            for name, make in sinks.items():
                times = []
                n = 0
                for _ in range(args.repeat):
                    write, close = make()
                    t, n = run_path(session, batches, write)
                    close()
                    times.append(t)
                t = min(times)  # CPU time: other work on the machine only adds to it
                eps = events / (drain_s + t)
                if name.startswith("JSONL"):
                    best_jsonl = eps
                rows.append(
                    f"| drain + {name} | {eps:,.0f} | {n / (drain_s + t):,.0f} | {eps / (events / drain_s):.3f} |"
                )
                print(rows[-1], flush=True)
            received, live_lost, live_gen, wall, used, peak = live(args.live_seconds, tmp / "live.jsonl")
    finally:
        for p in tmp.iterdir():
            p.unlink()
        tmp.rmdir()
    live_lines = [
        f"Live: `KernelSource.poll` into the JSONL file sink on CPU {TRACER_CPU} (default 16 MiB ring) while "
        f"{args.live_seconds:g} s of bulk iperf3 ran on CPU {TRAFFIC_CPU}: {received:,} events received, "
        f"{live_lost:,} lost, {live_gen:,} generated; {received / wall:,.0f} events/s of wall time, "
        f"{used / wall:.0%} of one CPU busy; the ring was at most {peak:.1%} full before a poll"
        + (
            " (so any loss here is the kernel failing a reservation with the ring nearly empty, not the "
            "collector falling behind)."
            if live_lost and peak < 0.5
            else "."
        ),
        "",
    ]
    print(live_lines[0])
    traffic = f"`-N -l {args.write_len}`" if args.write_len else "bulk"
    head = [
        f"`python bench/run.py collect_decode` ({datetime.now(UTC):%Y-%m-%d}, kernel {platform.release()}, "
        f"{os.cpu_count()} CPUs shared with other engineers' work). {'+'.join(args.providers)} at ppl=1; "
        f"{args.fill_seconds:g} s of iperf3 on loopback ({traffic}) filled a "
        f"{args.ring >> 20} MiB ring unread: {events:,} events received, {lost} lost, {generated:,} generated "
        f"(kernel counters). One CPU then drained it and ran each path over the same batches "
        f"(best of {args.repeat}); rates are events over the process CPU time of drain + path.",
        "",
        "| path (one CPU) | events/s | records/s | ratio to bare drain |",
        "|---|---:|---:|---:|",
    ]
    return [*head, *rows, "", *live_lines], best_jsonl if lost == 0 else 0.0


def _file_sink(path: Path) -> tuple[Callable[[list], None], Callable[[], None]]:
    sink = FileSink(path)
    return sink.write, sink.close


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fill-seconds", type=float, default=2.0)
    parser.add_argument("--write-len", type=int, default=0, help="iperf3 -N -l N (0: bulk, the default)")
    parser.add_argument("--ring", type=int, default=256 << 20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--live-seconds", type=float, default=4.0)
    parser.add_argument(
        "--providers",
        type=lambda text: tuple(text.split(",")),
        default=("tcp", "siftr"),
        help="for the fill (the live run and the target are tcp,siftr)",
    )
    parser.add_argument("--save", help="also save the drained events (.npy) for offline profiling")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_collect_decode: needs root (loads eBPF programs)", file=sys.stderr)
        return 1
    body, jsonl = measure(args)
    verdict = "met" if jsonl >= TARGET else "not met"
    body.append(
        f"Target ≥ {TARGET:,} events/s on one core without loss, into the JSONL sink: {jsonl:,.0f} ({verdict})."
    )
    print("\n".join(body))
    if not args.no_docs:
        write_section(SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

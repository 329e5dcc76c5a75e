"""Benchmark: the anomaly rule engine's cost per record against the file sink's encoding.

A synthetic live stream (tests/alert_streams.py builders): 100 connections at a time,
each with its lifecycle, siftr samples with snd_nxt progress and srtt, a retransmit in
Recovery every 200 samples, flow counters; N records in total (default 200,000).
Measured in the same run:
1. RuleEngine.feed for every record, plus a sweep per second of record time;
2. peer: translators.records.to_json for every record (what `collect --out` pays);
3. peer: a bare loop dispatching each record on its type into a counter.
Ratios are engine / peer. Keep in sync with: analysis/alerts/engine.py,
docs/benchmarks.md ("## Alert engine").
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def stream(n: int) -> list:
    from tests.alert_streams import Stream

    s = Stream()
    recs: list = []
    flows = []
    while len(recs) < n:
        if len(flows) < 100:
            f = s.flow(dst=f"10.1.{len(recs) % 250}.{len(flows)}", dport=443)
            recs += [s.state(f, "CLOSED", "SYN_SENT"), s.state(f, "SYN_SENT", "ESTABLISHED")]
            flows.append([f, 0, 0])
        for entry in flows:
            f, nxt, k = entry
            s.advance(0.00005)
            nxt += 1448
            recs.append(s.siftr(f, snd_nxt=nxt, snd_una=nxt - 14480, snd_cwnd=40 * 1448, mss=1448, srtt=900 + k % 50,
                                rcv_wnd=65535, snd_wnd=262144, ca_state="Open"))  # fmt: skip
            if k % 200 == 199:
                recs.append(s.retrans(f, ca_state="Recovery", tcp_seq=nxt - 14480, state="ESTABLISHED"))
            entry[1], entry[2] = nxt, k + 1
        if flows[0][2] >= 2000:  # the oldest connection closes
            f = flows.pop(0)[0]
            recs += [s.state(f, "ESTABLISHED", "FIN_WAIT_1"), s.state(f, "FIN_WAIT_1", "FIN_WAIT_2"),
                     s.state(f, "FIN_WAIT_2", "TIME_WAIT")]  # fmt: skip
    return recs[:n]


def timed(fn, recs: list) -> float:
    t0 = time.perf_counter()
    fn(recs)
    return time.perf_counter() - t0


def engine_pass(recs: list) -> None:
    from analysis.alerts.config import load_config
    from analysis.alerts.engine import RuleEngine

    e = RuleEngine(load_config(env={}))
    next_tick = recs[0].ts_wall + 1
    for r in recs:
        e.feed(r)
        if r.ts_wall >= next_tick:
            e.tick(r.ts_wall)
            next_tick = r.ts_wall + 1
    e.finish()


def encode_pass(recs: list) -> None:
    from translators.records import to_json

    for r in recs:
        to_json(r)


def dispatch_pass(recs: list) -> None:
    counts: dict[type, int] = {}
    for r in recs:
        counts[type(r)] = counts.get(type(r), 0) + 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_alerts")
    parser.add_argument("--records", type=int, default=200_000)
    args = parser.parse_args(argv)
    sys.path[:0] = [str(ROOT)]
    recs = stream(args.records)
    results = {name: timed(fn, recs) for name, fn in
               (("engine", engine_pass), ("to_json", encode_pass), ("dispatch", dispatch_pass))}  # fmt: skip
    n = len(recs)
    for name, secs in results.items():
        print(f"{name:>9}: {n / secs:12,.0f} records/s  ({secs * 1e6 / n:6.2f} us/record)")
    print(f"engine / to_json: {results['engine'] / results['to_json']:.1f}x")
    print(f"engine / dispatch: {results['engine'] / results['dispatch']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

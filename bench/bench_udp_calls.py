"""Benchmark: what the UDP page costs a TCP host, recorded per packet (udp) or per call
(udp-calls, the always-on mode), beside untraced and beside the sets they join.

The measure is CPU time per byte of bulk loopback TCP (bench/cpu_cost.py): one thread
moving blocks through a loopback TCP connection, each contender's programs attached for
its own blocks, between untraced blocks; a ratio is a traced block's cost over the
untraced blocks either side. TCP traffic is the judged case: on a host whose traffic is
TCP, every program udp runs per packet is pure cost, while udp-calls runs nothing for a
TCP packet (its programs fire on UDP calls only). Then, with kernel.bpf_stats_enabled,
the programs' own run time per program. Writes its section of docs/benchmarks.md. Needs
root. Keep in sync with: nettrail/commands/up.py (COLLECTOR_PROVIDERS, WITHIN_BUDGET).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from bpf_stats import per_program  # noqa: E402
from cpu_cost import Contender, Worker, measure, quartiles, ratio_table  # noqa: E402
from doc_section import write_section  # noqa: E402

from collector.bpf.loader import Options  # noqa: E402
from nettrail.commands.up import COLLECTOR_PPL  # noqa: E402

SECTION = "## udp-calls: the UDP page without a program per packet"
BUDGET = 1.03
SETS = (
    "tcp",
    "tcp,skb",
    "tcp,udp",
    "tcp,udp-calls",
    "tcp,skb,udp-calls",
    "tcp,siftr,skb,ip-flows,udp",
    "tcp,siftr,skb,ip-flows,udp-calls",
)


def contenders() -> list[Contender]:
    out = [Contender("untraced", None)]
    for s in SETS:
        out.append(Contender(s, Options(providers=tuple(s.split(",")), ppl=COLLECTOR_PPL, exclude_pid=os.getpid())))
    return out


def lines(cs: list[Contender], args: argparse.Namespace, load: str, user_share: float) -> list[str]:
    base = cs[0]
    med = {c.name: quartiles(c.ratios)[1] for c in cs[1:]}
    out = [
        f"`python bench/run.py udp_calls` ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC, kernel {platform.release()}, "
        f"{os.cpu_count()} CPUs, load average {load}). CPU time per byte of bulk loopback TCP (`bench/cpu_cost.py`: "
        "one thread writes 128 KiB to a loopback TCP socket and reads it from the other end, 256 MiB a block; "
        f"the contenders take turns block by block between untraced blocks, {args.rounds} rounds, the order "
        "rotated; a ratio is a traced block over the untraced blocks either side). Every set runs with "
        f"--ppl {COLLECTOR_PPL} and no filter, as `nettrail up` does; the thread spent {user_share:.0%} of its CPU "
        "in user space.",
        "",
        *ratio_table(cs),
    ]
    untraced = statistics.median(base.costs)
    out += [
        "",
        f"In-kernel time, {args.stats_blocks} more blocks per contender with `kernel.bpf_stats_enabled=1`: the "
        "programs' run time per byte as a share of the untraced CPU per byte; per program: runs, ns per run.",
        "",
        "| contender | in-kernel, share of untraced CPU | per program |",
        "|---|---|---|",
    ]
    for c in cs[1:]:
        if c.stats_bytes:
            ns = sum(t for _, t in c.stats.values()) / c.stats_bytes
            out.append(f"| {c.name} | {ns / untraced:.2%} | {per_program(c.stats, c.empty)} |")
    light = med["tcp,skb,udp-calls"]
    out += [
        "",
        "Reading, this run:",
        "",
        f"- the UDP page per packet (udp) costs {med['tcp,udp'] / med['tcp']:.3f} of tcp alone; per call "
        f"(udp-calls) {med['tcp,udp-calls'] / med['tcp']:.3f}: udp-calls loads no program that runs for a TCP "
        "packet (its cgroup programs run for UDP calls only).",
        f"- `tcp,skb,udp-calls` (states, retransmits, resets, drops with their reasons, the UDP page): "
        f"{light:.3f} of untraced — {'within' if light <= BUDGET else 'NOT within'} the 3% always-on budget "
        f"(`tcp,skb`: {med['tcp,skb']:.3f}; skb notes UDP senders from the cgroup sendmsg programs, not at "
        "net_dev_queue, so it too runs nothing per TCP packet but the drops').",
        f"- in `nettrail up`'s set (tcp,siftr,skb,ip-flows and the UDP page): with udp "
        f"{med['tcp,siftr,skb,ip-flows,udp']:.3f}, with udp-calls {med['tcp,siftr,skb,ip-flows,udp-calls']:.3f} "
        "(ip-flows' and siftr's programs on every packet remain).",
        "",
    ]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60, help="rounds of blocks (one per contender)")
    parser.add_argument("--block", type=int, default=256 << 20, help="bytes per block")
    parser.add_argument("--stats-blocks", type=int, default=8, help="blocks per contender under bpf_stats")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_udp_calls: needs root (loads eBPF programs)", file=sys.stderr)
        return 1
    cs = contenders()
    loads = [os.getloadavg()[0]]
    worker = Worker(args.block)
    try:
        measure(cs, args.rounds, worker, args.stats_blocks)
    finally:
        worker.close()
    loads.append(os.getloadavg()[0])
    body = lines(cs, args, f"{min(loads):.1f}–{max(loads):.1f}", worker.user_share)
    print("\n".join(body))
    if not args.no_docs:
        write_section(SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

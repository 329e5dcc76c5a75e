"""Benchmark: how long a provider swap leaves the tracepoints untraced, against a restart.

`nettrail collect --providers-from-server` changes what it traces without a restart
(collector/bpf/swap.py): the new programs are loaded and verified while the old ones run,
then the old ones are detached and the new ones attached at once. What a user gives up is
the gap between the first detach and the last attach, sent on the new collector_status as
`untraced_ns`. The peer is the restart it replaces, in the same process and run: detach
and close the old programs, then open, load, verify and attach the new ones (a real
restart also starts a process and imports nettrail, which this leaves out, so the ratio
is a lower bound). Its floor is one RCU grace period: a tracepoint whose last program was
detached waits for one when the next is attached (tracepoint.c's 1->0->1 transition);
the first attach pays it for all. Both go back and forth between `nettrail up`'s default set (with
sampled lifecycles) and the set within the always-on budget (`tcp,skb`), interleaved,
ROUNDS times each way. Results go to docs/benchmarks.md under SECTION.

Usage: python bench/run.py swap [-- --rounds N] [--no-write]   (as root: loads eBPF programs)
Keep in sync with: docs/benchmarks.md (its section), docs/collector.md (--providers-from-server).
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
from doc_section import write_section  # noqa: E402

from collector.bpf import settle  # noqa: E402
from collector.bpf.loader import KernelSession, Options  # noqa: E402
from collector.bpf.swap import Swap, prepare  # noqa: E402

SECTION = "## Provider swap: the untraced gap against a restart"
DEFAULT = Options(providers=("tcp", "siftr", "skb", "ip-flows", "udp", "skb-lifecycle"), ppl=8, skb_sample=256)
BUDGET = Options(providers=("tcp", "skb"))
SETS = {"default -> tcp,skb": (DEFAULT, BUDGET), "tcp,skb -> default": (BUDGET, DEFAULT)}


def swapped(before: Options, after: Options) -> float:
    """Untraced milliseconds of one swap, as the collector makes it."""
    with KernelSession(before) as running:
        swap = Swap(None, before)
        swap.next = prepare(after, running)
        following = swap.next
        try:
            swap.switch(running)
            assert not swap.failed, swap.failed
        finally:
            following.close()
    return swap.untraced_ns / 1e6


def restarted(before: Options, after: Options) -> float:
    """Untraced milliseconds of the restart a swap replaces: from the first detach to the
    last attach, with the new programs loaded in between."""
    running = KernelSession(before)
    running.__enter__()
    start = time.monotonic_ns()
    running.close()
    following = KernelSession(after)
    following.__enter__()
    gap = time.monotonic_ns() - start
    following.close()
    return gap / 1e6


def quartiles(values: list[float]) -> str:
    if len(values) < 2:
        return "one round"
    q = statistics.quantiles(values, n=4)
    return f"{q[0]:.1f}-{q[2]:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_swap")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_swap: needs root (loads eBPF programs)", file=sys.stderr)
        return 2
    results: dict[str, dict[str, list[float]]] = {name: {"swap": [], "restart": []} for name in SETS}
    for r in range(args.rounds):
        for name, (before, after) in SETS.items():
            ways = [("swap", swapped), ("restart", restarted)]
            for way, fn in ways if r % 2 == 0 else reversed(ways):  # the order alternates
                results[name][way].append(fn(before, after))
    grace: list[float] = []  # the gap's floor: the first attach waits for one (see the module's docstring)
    for _ in range(10):
        start = time.monotonic_ns()
        settle.synchronize_rcu()
        grace.append((time.monotonic_ns() - start) / 1e6)
    load = os.getloadavg()[0]
    rows = ["| change | swap: untraced ms, median (quartiles) | restart: untraced ms, median (quartiles) | restart / swap |", "|---|---|---|---|"]  # fmt: skip
    for name, got in results.items():
        swap_ms, restart_ms = statistics.median(got["swap"]), statistics.median(got["restart"])
        rows.append(
            f"| {name} | {swap_ms:.1f} ({quartiles(got['swap'])}) | {restart_ms:.1f} ({quartiles(got['restart'])}) | "
            f"{restart_ms / swap_ms:.0f}x |"
        )
    print("\n".join(rows))
    if args.no_write:
        return 0
    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    body = [
        f"`python bench/run.py swap` ({when}, kernel {os.uname().release}, {os.cpu_count()} CPUs, load average "
        f"{load:.1f}; {args.rounds} rounds each way, swap and restart interleaved). The gap is from the first "
        "detach to the last attach: what `collector_status.untraced_ns` reports for a swap. The restart is made in "
        "the same process (close, then open, load, verify and attach), so a real one, which also starts a process "
        "and imports nettrail, leaves longer untraced: the ratio is a lower bound. `default` is `nettrail up`'s set "
        "(tcp, siftr --ppl 8, skb, ip-flows, udp, skb-lifecycle --skb-sample 256). Most of a swap's gap is its "
        "first attach, which waits for the kernel: a tracepoint that lost its last program waits for an RCU grace "
        "period when the next one comes (tracepoint.c's 1->0->1 transition), once for all of them (16-18 ms for "
        "the first attach against 0.1-0.4 ms for each other one, by hand; 2-3 ms to detach them all); a grace "
        f"period waited for from user space (collector/bpf/settle.py) took a median {statistics.median(grace):.1f} "
        "ms in this run. Mapping the new ring (2.8-3.2 ms, by hand) is done before the gap.",
        "",
        *rows,
    ]
    write_section(SECTION, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

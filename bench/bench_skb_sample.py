"""Benchmark: what sampled skb lifecycles (--skb-sample N) cost loopback TCP, alone and
added to `nettrail up`'s always-on providers, beside the untraced transfer.

The measure is CPU time per byte (bench/cpu_cost.py): one thread moving blocks of bytes
through a loopback TCP connection, its thread CPU time per byte with each contender's
programs attached, block by block between untraced blocks; a ratio is a traced block's
cost over the untraced blocks either side. Then, with kernel.bpf_stats_enabled, the
programs' own run time per byte and per program (where the time goes), beside empty
programs on the same tracepoints (the floor). Optionally (--cycles) the older throughput
measure inside one iperf3 transfer (bench/toggled.py), which scatters on a busy machine.
Contenders: untraced, `nettrail up`'s set without lifecycles, skb alone (drops only),
the set with `skb-lifecycle --skb-sample N` (sampled: the ends only, --skb-stages ends, as
`nettrail up` runs) and skb + skb-lifecycle sampled alone for each N asked, and optionally
the set with every stage hook (--all-stages: --skb-stages all), every buffer followed and
an older build of kmod/ (--before-object, with every stage hook attached, as the loader
did before --skb-stages) for the same set. Writes its section of docs/benchmarks.md. Needs root.
Keep in sync with: nettrail/commands/up.py (COLLECTOR_PROVIDERS, COLLECTOR_PPL,
COLLECTOR_SKB_SAMPLE).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from bpf_stats import per_program  # noqa: E402
from cpu_cost import CHUNK, Contender, Worker, measure, veth_pair  # noqa: E402
from cpu_cost import ratio_table as cpu_ratio_table  # noqa: E402
from doc_section import write_section  # noqa: E402
from toggled import PHASE, TRAFFIC_CPU, pinned_toggled, ratio_rows  # noqa: E402

from collector.bpf.loader import CONTEXT_PROGRAMS, Filters, Options, program_names  # noqa: E402
from nettrail.commands.up import COLLECTOR_PPL, COLLECTOR_SKB_SAMPLE  # noqa: E402
from nettrail.commands.up import PER_PACKET_PROVIDERS as COLLECTOR_PROVIDERS  # noqa: E402  (up's default then)

SECTION = "## Sampled skb lifecycles and nettrail up's default providers"
PORT = 52023  # not bench_collect's or bench_collect_decode's: they may run at the same time
BUDGET = 1.03  # the always-on budget: ≤ 3% more CPU per byte than untraced
WITHIN_BUDGET = "tcp,skb,udp-calls"  # the set within the budget then (before siftr-poll)
UP = tuple(COLLECTOR_PROVIDERS.split(","))
UP_NAME = f"nettrail up's set without lifecycles: {COLLECTOR_PROVIDERS} --ppl {COLLECTOR_PPL}"
SKB_NAME = "skb alone (drops only, always-on)"
LIGHT_NAME = f"the set without per-packet providers: NETTRAIL_PROVIDERS={WITHIN_BUDGET}"


def up_with(n: int) -> str:
    return f"nettrail up's set + skb-lifecycle --skb-sample {n}"


def alone(n: int) -> str:
    return f"skb + skb-lifecycle --skb-sample {n}"


def options(**settings: Any) -> Options:
    # no filter, as nettrail up runs: every buffer on the host is counted and may be followed
    return Options(filters=Filters(), ringbuf_bytes=16 << 20, **settings)


def floor_of(n: int) -> str:
    return f"empty programs on the hooks of {up_with(n)}"


def floor_with_context(n: int) -> str:
    return f"{floor_of(n)}, and on softirq_entry/exit"


def with_softirq_hooks(n: int) -> str:
    return f"{up_with(n)}, task context from the softirq hooks"


def with_ppl(n: int, ppl: int) -> str:
    return f"{up_with(n)}, --ppl {ppl}"


def all_stages(n: int) -> str:
    return f"{up_with(n)}, --skb-stages all"


def contenders(
    samples: list[int],
    full: bool,
    before: Path | None,
    label: str = "older kmod/",
    ppl_alt: int = 0,
    every_stage: bool = False,
    floor: bool = False,
) -> list[Contender]:
    out = [Contender("untraced", None), Contender(UP_NAME, options(providers=UP, ppl=COLLECTOR_PPL))]
    out.append(Contender(SKB_NAME, options(providers=("skb",))))
    out.append(Contender(LIGHT_NAME, options(providers=tuple(WITHIN_BUDGET.split(",")))))
    for n in samples:
        out.append(Contender(up_with(n), options(providers=(*UP, "skb-lifecycle"), ppl=COLLECTOR_PPL, skb_sample=n)))
    for n in samples:
        out.append(Contender(alone(n), options(providers=("skb", "skb-lifecycle"), skb_sample=n)))
    if full:
        out.append(Contender("skb + skb-lifecycle, every buffer", options(providers=("skb", "skb-lifecycle"))))
    if every_stage:  # the same set with the stage hooks a sampled run leaves out by default
        settings = {"providers": (*UP, "skb-lifecycle"), "ppl": COLLECTOR_PPL, "skb_sample": samples[0]}
        out.append(Contender(all_stages(samples[0]), options(skb_stages="all", **settings)))
    if floor:  # the dispatch alone: empty programs where the set with lifecycles has its programs
        settings = {"providers": (*UP, "skb-lifecycle"), "ppl": COLLECTOR_PPL, "skb_sample": samples[0]}
        hooks = frozenset(program_names(options(**settings)))  # as the loader chooses them on this kernel
        out.append(Contender(floor_of(samples[0]), None, hooks=hooks))
        out.append(Contender(floor_with_context(samples[0]), None, hooks=hooks | set(CONTEXT_PROGRAMS)))
        # the set as it ran where in_task() could not read the preempt count
        out.append(Contender(with_softirq_hooks(samples[0]), options(softirq_hooks=True, **settings)))
    if ppl_alt:  # the same set sampling siftr less often: what its samples cost
        settings = {"providers": (*UP, "skb-lifecycle"), "ppl": ppl_alt, "skb_sample": samples[0]}
        out.append(Contender(with_ppl(samples[0], ppl_alt), options(**settings)))
    if before is not None:
        settings = {"providers": (*UP, "skb-lifecycle"), "ppl": COLLECTOR_PPL, "skb_sample": samples[0]}
        # every stage hook attached, as the loader did before --skb-stages
        out.append(
            Contender(f"{up_with(samples[0])}, {label}", options(object_path=before, skb_stages="all", **settings))
        )
    return out


def to_up(c: Contender, up: Contender) -> float:
    """The contender's median ratio over the set without lifecycles' (each to its own untraced neighbours)."""
    return statistics.median(c.ratios) / statistics.median(up.ratios)


def cost_lines(cs: list[Contender], args: argparse.Namespace, load: str, user_share: float) -> list[str]:
    out = [
        f"`python bench/run.py skb_sample` ({datetime.now(UTC):%Y-%m-%d}, kernel {platform.release()}, 2 CPUs, "
        f"load average {load}). The measure is CPU time per byte (`bench/cpu_cost.py`): one thread on CPU "
        f"{TRAFFIC_CPU} writes {CHUNK >> 10} KiB to a loopback TCP socket and reads it from the other end, "
        f"{args.block >> 20} MiB per block, and its thread CPU time is the whole path's (send, the receive "
        "softirq, which runs in that thread, ACKs, the copy out; no IRQ_TIME_ACCOUNTING here), so other work on "
        "the machine delays it without changing what it costs. The contenders take turns block by block "
        f"(untraced, a contender, untraced, the next, ...; {args.rounds} rounds, the order rotated), each "
        "contender's programs loaded once, with no filter as `nettrail up` runs, and attached for its own blocks "
        "only. A ratio is a traced block's CPU per byte over the mean of the untraced blocks either side of it: "
        "blocks a tenth of a second apart share the host's state, which moves single runs a second apart by "
        f"±15%. The thread spent {user_share:.0%} of its CPU time in user space (Python's own work per write), "
        "which the programs do not touch: the kernel's share of a ratio's excess is that much larger. The "
        "always-on budget is ≤ 3% (ratio ≤ 1.030), as each always-on mode was judged.",
        "",
    ]
    return out + ratio_table(cs) + stats_table(cs, args)


def ratio_table(cs: list[Contender]) -> list[str]:
    up = next(c for c in cs if c.name == UP_NAME)
    return cpu_ratio_table(cs, ("to the set without lifecycles", lambda c: f"{to_up(c, up):.3f}"))


def stats_table(cs: list[Contender], args: argparse.Namespace) -> list[str]:
    base = cs[0]
    out = [
        "",
        f"In-kernel time, {args.stats_blocks} more blocks per contender with `kernel.bpf_stats_enabled=1`: the "
        "programs' run time per byte, as a share of the untraced CPU per byte (median above), and the floor, "
        "empty programs (`bench/empty_programs.bpf.c`) on the same tracepoints at the contender's run counts "
        "(what attaching costs with no work done; the statistics' own two clock reads per run are in both). Runs "
        "for other traffic on the machine (no filter) are in it too. Per program: runs, ns per run (the empty "
        "program's).",
        "",
        "| contender | in-kernel, share of untraced CPU | floor | per program |",
        "|---|---|---|---|",
    ]
    untraced = statistics.median(base.costs)
    for c in cs:
        if not c.stats_bytes:
            continue
        ns = sum(t for _, t in c.stats.values()) / c.stats_bytes
        floor = c.floor / c.stats_bytes
        out.append(f"| {c.name} | {ns / untraced:.2%} | {floor / untraced:.2%} | {per_program(c.stats, c.empty)} |")
    return [*out, ""]


# How to read the tables (the numbers' own verdicts follow them).
READING = [
    'Reading: "to the set without lifecycles" is what turning lifecycles on adds to `nettrail up`; "ratio '
    'to untraced" is what a whole set costs this workload, whose per-packet work is small (about 32 KB per '
    "loopback packet, ACKs included, no device), so per-packet hooks weigh more here than on a wire. A buffer "
    "not followed returns from each stage hook after one load; what remains is mostly the dispatch of the "
    "stage tracepoints themselves, about the empty programs' time per run in the in-kernel table, so a larger "
    "N changes little beyond the followed buffers' own work. Sampled, `nettrail up` records the ends only "
    "(--skb-stages ends): net_dev_start_xmit, net_dev_xmit and the receive entry hooks (loopback's "
    "netif_rx_entry) are not attached, skb_copy_datagram_iovec, consume_skb and kfree_skb are; the "
    "--skb-stages all row attaches them too. The in-kernel shares carry the "
    "statistics' two clock reads per run and run for every packet on the machine, so they overstate what the "
    "CPU ratios show.",
    "",
]


def veth_lines(cs: list[Contender], args: argparse.Namespace, load: str, user_share: float) -> list[str]:
    """The same contenders on a TCP transfer over a veth pair (reported beside loopback, never instead)."""
    out = [
        "### The same over a veth pair",
        "",
        f"The same measure and contenders, right after (load average {load}), on a TCP connection from this "
        f"namespace to a listener in another one over a veth pair (`bench/cpu_cost.py`, veth_pair: MTU 1500, "
        "the kernel's offloads as they come, so TCP still sends GSO buffers of up to 64 KiB, which veth passes "
        "on whole): the path of a real NIC's stack without the driver. The receive side runs in the same "
        "thread (veth's netif_rx, then the softirq when the sender re-enables bottom halves), as on loopback; "
        f"{args.rounds} rounds. The thread spent {user_share:.0%} of its CPU time in user space. Loopback stays "
        "the judged worst case.",
        "",
    ]
    return out + ratio_table(cs) + stats_table(cs, args) + verdict_lines(cs, args.sample, "over the veth pair")


def verdict_lines(cs: list[Contender], samples: list[int], where: str = "") -> list[str]:
    up = next(c for c in cs if c.name == UP_NAME)
    by_name = {c.name: c for c in cs}
    out = [
        f"Budget, this run{' ' + where if where else ''} (the target: the whole default set, lifecycles "
        "included, ≤ 1.030 of untraced):",
        "",
    ]
    ratio_set = statistics.median(up.ratios)
    out.append(
        f"- `nettrail up`'s set without lifecycles: {ratio_set:.3f} of untraced — "
        f"{'met' if ratio_set <= BUDGET else 'NOT met'}."
    )
    for n in samples:
        if up_with(n) not in by_name:
            continue
        with_n = by_name[up_with(n)]
        ratio_up, ratio_base = to_up(with_n, up), statistics.median(with_n.ratios)
        out.append(
            f"- `nettrail up` with skb-lifecycle --skb-sample {n}: {ratio_base:.3f} of untraced — "
            f"{'met' if ratio_base <= BUDGET else 'NOT met'}; what lifecycles add, {ratio_up:.3f} of the set "
            f"without them — {'within' if ratio_up <= BUDGET else 'over'} 3%."
        )
    for n in samples[:1]:
        if all_stages(n) not in by_name or up_with(n) not in by_name:
            continue
        every = by_name[all_stages(n)]
        ratio_all = statistics.median(every.ratios)
        out.append(
            f"- the same with every stage hook (--skb-stages all, as before the option): {ratio_all:.3f} of "
            f"untraced — {'met' if ratio_all <= BUDGET else 'NOT met'}; what lifecycles add then, "
            f"{to_up(every, up):.3f} of the set without them; the ends only cost "
            f"{statistics.median(by_name[up_with(n)].ratios) / ratio_all:.3f} of it."
        )
    if with_softirq_hooks(samples[0]) in by_name and up_with(samples[0]) in by_name:
        hooks, preempt = (
            statistics.median(by_name[n].ratios) for n in (with_softirq_hooks(samples[0]), up_with(samples[0]))
        )
        out.append(
            f"- task context from the softirq hooks instead of the preempt count: {hooks:.3f} of untraced, "
            f"{hooks - preempt:+.3f} beside the preempt count's {preempt:.3f}."
        )
    for name in (floor_of(samples[0]), floor_with_context(samples[0])):
        if name in by_name:
            ratio = statistics.median(by_name[name].ratios)
            out.append(
                f"- {name} (the tracepoints' dispatch, no work done): {ratio:.3f} of untraced — "
                f"{'within' if ratio <= BUDGET else 'over'} the 3% budget before any work."
            )
    if LIGHT_NAME in by_name:
        ratio = statistics.median(by_name[LIGHT_NAME].ratios)
        out.append(
            f"- {LIGHT_NAME} (states, retransmits, resets, drops): {ratio:.3f} of untraced — "
            f"{'within' if ratio <= BUDGET else 'over'} the 3% budget."
        )
    skb = by_name.get(SKB_NAME)
    for n in samples:
        if alone(n) not in by_name:
            continue
        ratio = statistics.median(by_name[alone(n)].ratios)
        than_skb = f", {ratio / statistics.median(skb.ratios):.3f} of skb alone" if skb else ""
        out.append(
            f"- skb + skb-lifecycle --skb-sample {n} alone: {ratio:.3f} of untraced{than_skb} — "
            f"{'within' if ratio <= BUDGET else 'over'} the 3% budget."
        )
    return [*out, ""]


def toggled_lines(results: dict[str, list[float]], cycles: int) -> list[str]:
    return [
        f"Throughput inside one transfer (`bench/toggled.py`, {cycles} traced phases of {PHASE} s per contender, "
        "a ratio is a traced phase's throughput over the untraced phases either side): on a busy machine these "
        "scatter by far more than the 3% to be measured, hence the CPU measure above.",
        "",
        "| contender | median ratio to untraced | quartiles | min – max |",
        "|---|---|---|---|",
        *ratio_rows(results),
        "",
    ]


def selected(args: argparse.Namespace) -> list[Contender]:
    cs = [
        c
        for c in contenders(
            args.sample, args.full, args.before_object, args.before_label, args.ppl_alt, args.all_stages, args.floor
        )
        if c.name == "untraced" or args.only in c.name
    ]
    if not any(c.name == UP_NAME for c in cs):
        cs.insert(1, contenders(args.sample, False, None)[1])  # the peer of every "to the set" ratio
    return cs


def veth_run(args: argparse.Namespace) -> list[str]:
    cs = selected(args)
    loads = [os.getloadavg()[0]]
    with veth_pair() as veth:
        worker = Worker(args.block, veth)
        try:
            measure(cs, args.rounds, worker, args.stats_blocks)
        finally:
            worker.close()
    loads.append(os.getloadavg()[0])
    return veth_lines(cs, args, f"{min(loads):.1f}–{max(loads):.1f}", worker.user_share)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=120, help="rounds of blocks (one per contender)")
    parser.add_argument("--block", type=int, default=256 << 20, help="bytes per block")
    parser.add_argument(
        "--sample",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[COLLECTOR_SKB_SAMPLE],
        help=f"the Ns of --skb-sample to compare (default {COLLECTOR_SKB_SAMPLE}, up's)",
    )
    parser.add_argument("--full", action="store_true", help="also skb-lifecycle following every buffer")
    parser.add_argument("--before-object", type=Path, help="an older nettrail.bpf.o: up's set + lifecycles with it")
    parser.add_argument("--before-label", default="older kmod/", help="what --before-object was built from")
    parser.add_argument(
        "--all-stages", action="store_true", help="also up's set + lifecycles with --skb-stages all (every stage hook)"
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also empty programs on the set's hooks (with and without the context ones)",
    )
    parser.add_argument("--ppl-alt", type=int, default=0, help="also up's set + lifecycles with this --ppl")
    parser.add_argument("--stats-blocks", type=int, default=8, help="blocks per contender under bpf_stats")
    parser.add_argument("--cycles", type=int, default=0, help="also the toggled throughput phases per contender")
    parser.add_argument("--only", default="", help="run only the contenders whose name contains this (+ untraced)")
    parser.add_argument("--veth", action="store_true", help="also the same contenders over a veth pair")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_skb_sample: needs root (loads eBPF programs)", file=sys.stderr)
        return 1
    cs = selected(args)
    loads = [os.getloadavg()[0]]
    worker = Worker(args.block)
    try:
        measure(cs, args.rounds, worker, args.stats_blocks)
    finally:
        worker.close()
    loads.append(os.getloadavg()[0])
    toggled_results: dict[str, list[float]] = {}
    for c in cs:
        if args.cycles and c.opts is not None:
            toggled_results[c.name] = pinned_toggled(c.opts, args.cycles, PORT + 1)
            loads.append(os.getloadavg()[0])
    load = f"{min(loads):.1f}–{max(loads):.1f}"
    body = cost_lines(cs, args, load, worker.user_share) + READING + verdict_lines(cs, args.sample)
    if toggled_results:
        body += toggled_lines(toggled_results, args.cycles)
    if args.veth:
        body += veth_run(args)
    print("\n".join(body))
    if not args.no_docs:
        write_section(SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

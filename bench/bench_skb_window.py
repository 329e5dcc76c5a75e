"""Benchmark: sampled buffer lifecycles in windows (--skb-window OPEN/EVERY) against the
same lifecycles always on, beside untraced and the sets they join.

The measure is CPU time per byte of bulk loopback TCP (bench/cpu_cost.py): contenders take
turns block by block between untraced blocks; a ratio is a traced block's cost over the
untraced blocks either side. A windowed contender's windows run on its own clock, the time
its programs were attached for its blocks (a thread ticks collector/bpf/windows.SkbWindows
as the collector's poll loop does), so its blocks see the windows open and close, their
attaches and detaches included, in the proportion the collector would. Its blocks are of
two kinds (a window open or not), so the mean of its ratios is its cost; the tables give
mean and median for every contender. Writes its section of docs/benchmarks.md. Needs root.
Keep in sync with nettrail/commands/up.py (PER_PACKET_PROVIDERS, the former default,
COLLECTOR_SKB_SAMPLE, COLLECTOR_SKB_WINDOW).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from cpu_cost import Contender, Worker, measure, quartiles  # noqa: E402
from doc_section import write_section  # noqa: E402

from collector.bpf.loader import KernelSession, Options  # noqa: E402
from collector.bpf.windows import SkbWindows  # noqa: E402
from nettrail.commands.up import (  # noqa: E402
    COLLECTOR_PPL,
    COLLECTOR_SKB_SAMPLE,
    COLLECTOR_SKB_WINDOW,
    PER_PACKET_PROVIDERS,
)
from translators.skb_window import WindowSpec, parse_window  # noqa: E402

SECTION = "## Buffer lifecycles in windows (`bench/bench_skb_window.py`)"
WITHIN_BUDGET = "tcp,skb,udp-calls"  # the set within the budget when this was written (before siftr-poll)
ALWAYS_N = 256  # nettrail up's lifecycles before windows: one buffer in 256, all the time
BUDGET = 1.03
TICK_S = 0.005
NEVER = WindowSpec(0.05, 3600.0)  # a contender whose windows never open (WindowedSession)


class TickingSession(KernelSession):
    """Every traced contender's session: a thread ticks every TICK_S while its programs are
    attached, as the collector's poll loop would. The ticks themselves move the transfer's
    cost (a first run without them on the other contenders measured the windowed ones
    about 1.5% below the same set without lifecycles: the ticking thread takes the GIL
    from the ring-draining threads), so every contender has them and only what the ticks do
    differs."""

    def __init__(self, opts: Options) -> None:
        super().__init__(opts)
        self.elapsed = 0.0  # seconds its programs were attached, all its blocks
        self.since: float | None = None
        self.stop = threading.Event()
        self.ticker: threading.Thread | None = None

    def clock(self) -> float:
        return self.elapsed + (time.monotonic() - self.since if self.since is not None else 0.0)

    def tick(self) -> None:
        pass

    def resume(self) -> None:
        """Called once its programs are attached again, before the ticks start."""

    def attach_programs(self) -> None:
        super().attach_programs()
        self.resume()
        self.since = time.monotonic()
        self.stop.clear()
        self.ticker = threading.Thread(target=self._run, daemon=True)
        self.ticker.start()

    def _run(self) -> None:
        while not self.stop.wait(TICK_S):
            self.tick()

    def detach(self, settle: bool = True) -> None:
        if self.ticker is not None:
            self.stop.set()
            self.ticker.join()
            self.ticker = None
        if self.since is not None:
            self.elapsed, self.since = self.clock(), None
        super().detach(settle)


class WindowedSession(TickingSession):
    """A windowed contender: its windows' clock is the time its programs were attached."""

    def __init__(self, opts: Options) -> None:
        super().__init__(opts)
        assert opts.skb_window is not None
        self.windows = SkbWindows(self, opts.skb_window)
        self.windows.next_open = float("inf") if opts.skb_window == NEVER else 0.0

    def resume(self) -> None:
        if self.windows.state in ("open", "ending"):  # a window its last block left open goes on
            self.set_skb_window("open")
            if self.windows.state == "ending":
                self.set_skb_window("closed")

    def tick(self) -> None:
        self.windows.tick(self.clock())


def opts(providers: str, **more: object) -> Options:
    return Options(providers=tuple(providers.split(",")), ppl=COLLECTOR_PPL, exclude_pid=os.getpid(), **more)  # type: ignore[arg-type]


def contenders(base: str, spec: WindowSpec, in_window: int, closed_too: bool) -> list[Contender]:
    """One pass: untraced, a provider set, the set with lifecycles always on (one buffer in
    ALWAYS_N, nettrail up's before windows) and in windows; `closed_too`: also the set with
    windows that never open (what closed windows cost where first sightings are shared)."""
    life = f"skb-lifecycle --skb-sample {ALWAYS_N}"
    windowed = f"skb-lifecycle --skb-sample {in_window} --skb-window {spec.arg()}"
    with_life = f"{base},skb-lifecycle"
    out = [
        Contender("untraced", None),
        Contender(base, opts(base), session_class=TickingSession),
        Contender(f"{base} + {life}", opts(with_life, skb_sample=ALWAYS_N), session_class=TickingSession),
        Contender(
            f"{base} + {windowed}",
            opts(with_life, skb_sample=in_window, skb_window=spec),
            session_class=WindowedSession,
        ),
    ]
    if closed_too:
        shut = f"{base} + skb-lifecycle --skb-sample {in_window}, windows that stay closed"
        out.append(
            Contender(shut, opts(with_life, skb_sample=in_window, skb_window=NEVER), session_class=WindowedSession)
        )
    return out


def table(cs: list[Contender]) -> list[str]:
    base = cs[0]
    out = [
        "| contender | ratio to untraced, mean | median | quartiles | blocks | windows (open time) |",
        "|---|---|---|---|---|---|",
        f"| untraced ({statistics.median(base.costs):.3f} ns per byte) | 1.000 | 1.000 | – | {len(base.costs)} | – |",
    ]
    for c in cs[1:]:
        lo, med, hi = quartiles(c.ratios)
        s = c.session
        windows = (
            f"{s.windows.windows} ({s.windows.open_s:.1f} s of {s.elapsed:.1f} s)"
            if isinstance(s, WindowedSession)
            else "–"
        )
        out.append(
            f"| {c.name} | {statistics.fmean(c.ratios):.3f} | {med:.3f} | {lo:.3f} – {hi:.3f} | {len(c.ratios)} | {windows} |"
        )
    return out


def lines(
    light: list[Contender], up: list[Contender], args: argparse.Namespace, load: str, user_share: float
) -> list[str]:
    def mean(c: Contender) -> float:
        return statistics.fmean(c.ratios)

    verdict = "within" if mean(light[3]) <= BUDGET else "NOT within"
    return [
        f"`python bench/run.py skb_window` ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC, kernel {platform.release()}, "
        f"{os.cpu_count()} CPUs, load average {load}). CPU time per byte of bulk loopback TCP (`bench/cpu_cost.py`, "
        f"{args.block >> 20} MiB a block, the order rotated), every set with --ppl {COLLECTOR_PPL} and no filter as "
        f"`nettrail up` runs it; the transfer thread spent {user_share:.0%} of its CPU in user space. A windowed "
        f"contender's windows ({args.window.text()}) run on the time its programs were attached, so its blocks are a "
        "mix of open and closed windows: read its mean. Every traced contender has a thread ticking every "
        f"{TICK_S * 1000:g} ms while attached (the windows' clock, idle for the others). Two passes, each against its "
        "own untraced blocks: the set within the budget, then `nettrail up`'s per-packet set.",
        "",
        f"Pass 1, {args.rounds} rounds:",
        "",
        *table(light),
        "",
        f"Pass 2, {args.up_rounds} rounds:",
        "",
        *table(up),
        "",
        "Reading, this run:",
        "",
        f"- `{WITHIN_BUDGET}` with lifecycles in windows: {mean(light[3]):.3f} of untraced (mean) — {verdict} the 3% "
        f"always-on budget; with lifecycles always on (one buffer in {ALWAYS_N}, `nettrail up`'s before): "
        f"{mean(light[2]):.3f}; without lifecycles {mean(light[1]):.3f}.",
        f"- `nettrail up`'s per-packet set: {mean(up[3]):.3f} with lifecycles in windows, {mean(up[2]):.3f} with them "
        f"always on, {mean(up[1]):.3f} without them, {mean(up[4]):.3f} with windows that never open (where ip-flows "
        "keeps the first-sighting hooks attached, closed windows still cost the look at `skb_window`: about 14 ns "
        "more per netif_receive_skb run under bpf_stats). This pass does not order its lifecycle contenders: in "
        "the runs of 2026-12-03 one of them came out 3-6% above the others, not always the same one (windows "
        "that never open 1.133 in one run, 0.7% above the set without lifecycles in two others; the windowed "
        "one 0.7% above in one run, 6% in another), an offset of the session, not of its programs, which "
        "pass 1's contenders did not show in four runs (the windowed one 1.016-1.024).",
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300, help="rounds of pass 1 (the set within the budget)")
    parser.add_argument("--up-rounds", type=int, default=150, help="rounds of pass 2 (nettrail up's set)")
    parser.add_argument("--block", type=int, default=512 << 20, help="bytes per block")
    parser.add_argument("--window", type=parse_window, default=parse_window(COLLECTOR_SKB_WINDOW), help="OPEN/EVERY")
    parser.add_argument("--in-window", type=int, default=COLLECTOR_SKB_SAMPLE, help="--skb-sample inside windows")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_skb_window: needs root (loads eBPF programs)", file=sys.stderr)
        return 1
    light = contenders(WITHIN_BUDGET, args.window, args.in_window, closed_too=False)
    up = contenders(PER_PACKET_PROVIDERS, args.window, args.in_window, closed_too=True)
    loads = [os.getloadavg()[0]]
    worker = Worker(args.block)
    try:
        measure(light, args.rounds, worker, stats_blocks=0)
        measure(up, args.up_rounds, worker, stats_blocks=0)
    finally:
        worker.close()
    loads.append(os.getloadavg()[0])
    body = lines(light, up, args, f"{min(loads):.1f}–{max(loads):.1f}", worker.user_share)
    print("\n".join(body))
    if not args.no_docs:
        write_section(SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: SIFTR samples by polling (siftr-poll) against per-packet siftr, in the set
`nettrail up` runs (states, drops, the UDP page's calls, buffer lifecycles in windows).

The measure is CPU time per byte of bulk loopback TCP (bench/cpu_cost.py), as in
bench/bench_skb_window.py, whose sessions this reuses: every traced contender has the
thread that ticks the lifecycle windows' clock; a polled contender's thread also runs the
poller (collector/bpf/poll.SiftrPoller, its namespace scans included) on that clock, as
the collector's poll loop does. Writes its section of docs/benchmarks.md. Needs root.
Keep in sync with nettrail/commands/up.py (COLLECTOR_PROVIDERS, PER_PACKET_PROVIDERS).
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from bench_skb_window import WindowedSession, opts, table  # noqa: E402
from cpu_cost import Contender, Worker, measure  # noqa: E402
from doc_section import write_section  # noqa: E402

from collector.bpf.cgroup import CGROUP2_ENV  # noqa: E402
from collector.bpf.loader import DEFAULT_POLL_INTERVAL_S, KernelSession, Options  # noqa: E402
from collector.bpf.poll import SiftrPoller, namespaces  # noqa: E402
from nettrail.commands.up import COLLECTOR_PROVIDERS, COLLECTOR_SKB_SAMPLE, COLLECTOR_SKB_WINDOW  # noqa: E402
from translators.skb_window import parse_window  # noqa: E402

SECTION = "## SIFTR by polling (`bench/bench_siftr_poll.py`)"
BUDGET = 1.03
IDLE_PAIRS = 1000  # connections held open for the poller's cost with many sockets
POLLS = 30


class PolledSession(WindowedSession):
    """A windowed contender that also polls every socket, on its own attached-time clock."""

    def __init__(self, opts: Options) -> None:
        super().__init__(opts)
        self.poller = SiftrPoller(self, opts.poll_interval_s, 0.0)

    def tick(self) -> None:
        super().tick()
        self.poller.tick(self.clock())


class WithoutCgroupSession(PolledSession):
    """A polled contender loaded as on a kernel before 6.2, whose verifier refuses the cgroup
    programs: no cgroup v2 hierarchy found ($NETTRAIL_CGROUP2, collector/bpf/cgroup.py), so
    the skb provider notes UDP senders at net_dev_queue, a program on every packet sent."""

    def prepare(self) -> None:
        os.environ[CGROUP2_ENV] = "/nonexistent-cgroup2"
        try:
            super().prepare()
        finally:
            del os.environ[CGROUP2_ENV]


def contenders(in_window: int) -> list[Contender]:
    window = parse_window(COLLECTOR_SKB_WINDOW)
    life = dict(skb_sample=in_window, skb_window=window)
    polled = f"{COLLECTOR_PROVIDERS},skb-lifecycle"
    without = polled.replace("siftr-poll,", "")
    per_packet = polled.replace("siftr-poll", "siftr")
    old_kernel = polled.replace("udp-calls", "udp")
    suffix = f" (lifecycles one in {in_window}, windows {window.arg()})"
    return [
        Contender("untraced", None),
        Contender(without + suffix, opts(without, **life), session_class=WindowedSession),
        Contender(polled + suffix, opts(polled, **life), session_class=PolledSession),
        Contender(per_packet + suffix + ", --ppl 8", opts(per_packet, **life), session_class=WindowedSession),
        # the UDP page's only source before Linux 6.3 (no call tracepoints): udp, per packet
        Contender(
            old_kernel + suffix + ", the UDP page from the device",
            opts(old_kernel, **life),
            session_class=PolledSession,
        ),
        # as on Debian 12's 6.1 (no cgroup programs before 6.2), but for the UDP functions' fexit
        # programs, which this host refuses and which run for UDP calls only
        Contender(
            polled + suffix + ", as on 6.1: skb's UDP senders at net_dev_queue",
            opts(polled, **life),
            session_class=WithoutCgroupSession,
        ),  # fmt: skip
        # udp-calls from every system call's exit (kmod/udp_syscalls.bpf.c): its source before Linux
        # 6.3 where the kernel refuses the UDP functions' fexit programs (which this host refuses)
        Contender(
            polled + suffix + ", udp-calls from the system calls (before 6.3, fexit refused)",
            opts(polled, udp_call_source="system calls", **life),
            session_class=PolledSession,
        ),
    ]


def poll_times(session: KernelSession) -> list[float]:
    """Seconds of each of POLLS polls (the namespace scan apart), the ring read after each."""
    poller = SiftrPoller(session, DEFAULT_POLL_INTERVAL_S, 0.0)
    poller.netns = namespaces()
    reader = session.reader
    assert reader is not None
    out = []
    for _ in range(POLLS):
        t = time.perf_counter()
        poller.poll_all()
        out.append(time.perf_counter() - t)
        while reader.read().size:
            pass
    return out


def poller_cost() -> tuple[float, float, float, int]:
    """The collector's own CPU for polling (H4, not in the transfer's ratio): median ms of a
    namespace scan, of a poll of this host's sockets, and of one with IDLE_PAIRS more
    connections open; and how many TCP sockets this host had."""
    with KernelSession(Options(providers=("tcp", "siftr-poll"), exclude_pid=os.getpid())) as session:
        scans = []
        for _ in range(POLLS):
            t = time.perf_counter()
            namespaces()
            scans.append(time.perf_counter() - t)
        few = poll_times(session)
        host = sum(1 for _ in open("/proc/net/tcp")) + sum(1 for _ in open("/proc/net/tcp6")) - 2
        lst = socket.socket()
        lst.bind(("127.0.0.1", 0))
        lst.listen(IDLE_PAIRS)
        pairs = []
        try:
            for _ in range(IDLE_PAIRS):
                pairs.append(socket.create_connection(lst.getsockname()))
                pairs.append(lst.accept()[0])
            many = poll_times(session)[1:]  # the first samples every new socket once
        finally:
            for s in [*pairs, lst]:
                s.close()
    ms = 1000.0
    return statistics.median(scans) * ms, statistics.median(few) * ms, statistics.median(many) * ms, host


def lines(
    cs: list[Contender], args: argparse.Namespace, load: str, user_share: float, polls: int,
    cost: tuple[float, float, float, int],
) -> list[str]:  # fmt: skip
    def median(c: Contender) -> float:  # not the mean: one block the machine interrupted pulls a mean
        return statistics.median(c.ratios)

    verdict = "within" if median(cs[2]) <= BUDGET else "NOT within"
    return [
        f"`python bench/run.py siftr_poll` ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC, kernel {platform.release()}, "
        f"{os.cpu_count()} CPUs, load average {load}). CPU time per byte of bulk loopback TCP (`bench/cpu_cost.py`, "
        f"{args.block >> 20} MiB a block, the order rotated, {args.rounds} rounds), no filter, as `nettrail up` runs "
        f"it; the transfer thread spent {user_share:.0%} of its CPU in user space. siftr-poll polls every "
        f"{DEFAULT_POLL_INTERVAL_S:g} s ({polls} polls in its blocks), on the time its programs were attached.",
        "",
        *table(cs),
        "",
        "Reading, this run:",
        "",
        f"- `nettrail up`'s set with SIFTR samples by polling: {median(cs[2]):.3f} of untraced (median) — {verdict} "
        f"the 3% always-on budget; without SIFTR samples {median(cs[1]):.3f}; with per-packet siftr "
        f"(a program at tcp_probe and net_dev_queue for every packet) {median(cs[3]):.3f}; the UDP page from udp's "
        f"device records instead (a program at net_dev_queue and netif_receive_skb for every packet): "
        f"{median(cs[4]):.3f}. Before 6.3 udp-calls "
        "takes its calls at the exits of the kernel's UDP send/receive functions (fexit, kmod/udp_functions.bpf.c), "
        "which run for UDP calls only, none for this TCP transfer; this host refuses fexit, so they cannot be "
        "measured here. The rest of `nettrail up`'s set as Debian 12's 6.1 loads it (no cgroup programs before "
        f"6.2: the skb provider notes UDP senders at net_dev_queue): {median(cs[5]):.3f}, "
        f"{'within' if median(cs[5]) <= BUDGET else 'NOT within'} the budget. Where a kernel refuses the UDP "
        "functions' programs, the calls come from every system call's exit "
        f"(tp_btf/sys_exit, kmod/udp_syscalls.bpf.c; this transfer's send/recv are sendto/recvfrom calls, whose "
        f"socket it looks up): {median(cs[6]):.3f}, {'within' if median(cs[6]) <= BUDGET else 'NOT within'} the "
        "budget. Most of that is the hook itself: measured once by hand (2026-12-03, 30 rounds), the same program "
        "returning at once cost 1.033 against 1.011 without it (every system call takes the traced path once a "
        "sys_exit program is attached), and the per-call syscalls:sys_enter/sys_exit events of the six calls "
        "1.065-1.070 (a perf record per call).",
        f"- The poller's own CPU, the collector's (H4, outside the ratio above): a scan of the network namespaces "
        f"(every second) took a median {cost[0]:.2f} ms; a poll of this host's {cost[3]} TCP sockets "
        f"{cost[1]:.2f} ms, and with {2 * IDLE_PAIRS} idle sockets more {cost[2]:.2f} ms (each socket visited, none "
        f"sampled: nothing moved); at 10 polls a second that is {cost[1] / 100:.1%} and {cost[2] / 100:.1%} of one "
        "CPU.",
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--block", type=int, default=512 << 20, help="bytes per block")
    parser.add_argument("--in-window", type=int, default=COLLECTOR_SKB_SAMPLE, help="--skb-sample inside windows")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_siftr_poll: needs root (loads eBPF programs)", file=sys.stderr)
        return 1
    cs = contenders(args.in_window)
    loads = [os.getloadavg()[0]]
    worker = Worker(args.block)
    try:
        measure(cs, args.rounds, worker, stats_blocks=0)
    finally:
        worker.close()
    loads.append(os.getloadavg()[0])
    cost = poller_cost()
    session = cs[2].session
    polls = session.poller.polls if isinstance(session, PolledSession) else 0
    body = lines(cs, args, f"{min(loads):.1f}–{max(loads):.1f}", worker.user_share, polls, cost)
    print("\n".join(body))
    if not args.no_docs:
        write_section(SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

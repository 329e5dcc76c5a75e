"""CPU time a fixed amount of loopback TCP costs, traced and untraced: the always-on
budget's measure that other engineers' load on this 2-CPU machine does not move.

Throughput ratios need the traffic CPU to themselves: another process on it takes time
from the transfer, and single phases then scatter by far more than the 3% to be
measured. The CPU time a fixed transfer needs does not depend on how long it waited for
the CPU. The transfer here is one thread on the traffic CPU (WORKER) that writes 128 KiB
to a loopback TCP socket and reads it back from the other end, block after block: the
whole path -- send, loopback's receive softirq, which runs in that thread when it
re-enables bottom halves, the ACKs, the copy out -- is in that one thread's CPU time
(CLOCK_THREAD_CPUTIME_ID; this kernel has no IRQ_TIME_ACCOUNTING, so softirq time stays
with the thread it interrupted), and no scheduling decides how much work a byte takes.
Separate runs a second apart still differ by ±15% here (the other vCPU's work shares the
host's core and caches), so the contenders take turns block by block: untraced, one
contender, untraced, the next, ..., each block a fixed number of bytes (about 0.1 s),
every contender's programs loaded once (each its own KernelSession) and attached only
for its own blocks. A ratio is a traced block's CPU per byte over the mean of the
untraced blocks either side of it. Needs root.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

from bpf_stats import EmptyHooks, bpf_stats, empty_programs, floor_ns, prog_stats
from toggled import TRACER_CPU, TRAFFIC_CPU, cpu_kept_awake, drain, on_cpu

from collector.bpf.loader import KernelSession, Options

CHUNK = 128 * 1024  # one write, as iperf3's: about two data segments and two ACKs on loopback
# The worker: a loopback TCP pair in one thread, pinned; per line "g" on stdin one block,
# answered with its thread CPU ns; at EOF its user and system seconds (rusage, ticks).
# With a netns name and two addresses (argv 3-5, VETH), the listener is made inside that
# namespace at the second address and the sender connects from here, over the veth pair.
WORKER = f"""
import ctypes, os, resource, socket, sys, time
os.sched_setaffinity(0, {{int(sys.argv[2])}})
block, chunk = int(sys.argv[1]), {CHUNK}
if len(sys.argv) > 3:
    libc = ctypes.CDLL(None, use_errno=True)
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    there = os.open("/run/netns/" + sys.argv[3], os.O_RDONLY)
    assert libc.setns(there, 0x40000000) == 0, os.strerror(ctypes.get_errno())
    lst = socket.socket()
    lst.bind((sys.argv[5], 0))
    assert libc.setns(home, 0x40000000) == 0, os.strerror(ctypes.get_errno())
else:
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
lst.listen(1)
tx = socket.create_connection(lst.getsockname())
rx, _ = lst.accept()
for s in (tx, rx):  # the buffers autotuned, as a bulk transfer's (fixed sizes make small segments)
    s.settimeout(10)  # the one thread never waits for itself: a stall is an error, not a hang
out, buf = memoryview(bytes(chunk)), bytearray(chunk)
view = memoryview(buf)
for line in sys.stdin:
    start, sent = time.thread_time_ns(), 0
    while sent < block:
        tx.sendall(out)
        got = 0
        while got < chunk:
            got += rx.recv_into(view[got:], chunk - got)
        sent += chunk
    print(time.thread_time_ns() - start, flush=True)
r = resource.getrusage(resource.RUSAGE_THREAD)
print(r.ru_utime, r.ru_stime, flush=True)
"""


class Worker:
    """The transfer thread's process; block() runs one block and returns its CPU ns."""

    def __init__(self, block_bytes: int, veth: tuple[str, str, str] | None = None) -> None:
        """veth: (netns, this side's address, the other side's), from veth_pair(); None: loopback."""
        self.block_bytes = block_bytes
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(block_bytes), TRAFFIC_CPU, *(veth or ())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.user_share = 0.0

    def block(self) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("g\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self) -> None:
        """Ends the worker; keeps the share of its CPU time spent in user space (Python's
        own per-write work, which dilutes every ratio towards 1 by about that much)."""
        out, _ = self.proc.communicate(timeout=30)
        user, system = (float(x) for x in out.split())
        self.user_share = user / (user + system) if user + system else 0.0


VETH_NS, VETH_HERE, VETH_THERE = "nt-bench-veth", "10.203.0.1", "10.203.0.2"


@contextmanager
def veth_pair() -> Iterator[tuple[str, str, str]]:
    """A network namespace joined to this one by a veth pair (MTU 1500, the kernel's
    offloads as they come), torn down after: (netns, this side's address, its side's)."""
    ip = ["ip"]
    steps = [
        ["netns", "add", VETH_NS],
        ["link", "add", "ntbv0", "type", "veth", "peer", "name", "ntbv1", "netns", VETH_NS],
        ["addr", "add", f"{VETH_HERE}/30", "dev", "ntbv0"],
        ["link", "set", "ntbv0", "up"],
        ["-n", VETH_NS, "addr", "add", f"{VETH_THERE}/30", "dev", "ntbv1"],
        ["-n", VETH_NS, "link", "set", "ntbv1", "up"],
        ["-n", VETH_NS, "link", "set", "lo", "up"],
    ]
    try:
        for step in steps:
            subprocess.run(ip + step, check=True, capture_output=True)
        yield VETH_NS, VETH_HERE, VETH_THERE
    finally:
        subprocess.run(ip + ["netns", "del", VETH_NS], capture_output=True)  # takes the pair with it
        subprocess.run(ip + ["link", "del", "ntbv0"], capture_output=True)  # if the namespace never was


@dataclass
class Contender:
    """One provider set; None options and no hooks: untraced. hooks: empty programs on
    these tracepoints instead of a provider set (the dispatch floor, bpf_stats.EmptyHooks)."""

    name: str
    opts: Options | None
    hooks: frozenset[str] | None = None
    session: KernelSession | EmptyHooks | None = None
    costs: list[float] = field(default_factory=list)  # CPU ns per byte of each of its blocks
    ratios: list[float] = field(default_factory=list)  # each block over the untraced ones either side
    stats: dict[str, tuple[int, int]] = field(default_factory=dict)  # program -> (runs, ns) under bpf_stats
    empty: dict[str, tuple[int, int]] = field(default_factory=dict)  # the empty programs' meanwhile
    floor: float = 0.0  # ns the same runs cost empty programs
    stats_bytes: int = 0
    session_class: type[KernelSession] = KernelSession  # what loads its options (a windowed bench's own clock)


@contextmanager
def loaded(contenders: list[Contender]) -> Iterator[None]:
    """Every traced contender's session loaded and detached, a thread draining each ring
    (on the tracer's CPU: this process is pinned there)."""
    stop = threading.Event()
    with ExitStack() as stack:
        threads = []
        for c in contenders:
            if c.hooks is not None:
                c.session = stack.enter_context(EmptyHooks(c.hooks))
                continue
            if c.opts is None:
                continue
            c.session = stack.enter_context(c.session_class(c.opts))
            c.session.detach()
            threads.append(threading.Thread(target=drain, args=(c.session, stop), daemon=True))
            threads[-1].start()
        try:
            yield
        finally:
            stop.set()
            for t in threads:
                t.join()


@contextmanager
def attached(c: Contender) -> Iterator[None]:
    if c.session is not None:
        c.session.attach_programs()
    try:
        yield
    finally:
        if c.session is not None:
            c.session.detach()


def measure(contenders: list[Contender], rounds: int, worker: Worker, stats_blocks: int) -> None:
    """`rounds` rounds of untraced, contender, untraced, next contender, ..., untraced
    (the order rotated round by round), then `stats_blocks` blocks per traced contender
    with kernel.bpf_stats_enabled (which adds two clock reads per run, so the rounds run
    without it). contenders[0] is the untraced one."""
    base, traced = contenders[0], [c for c in contenders if c.opts is not None or c.hooks is not None]
    per_byte = 1.0 / worker.block_bytes
    with on_cpu(TRACER_CPU), cpu_kept_awake(TRACER_CPU), loaded(contenders):
        for _ in range(3):  # warm-up: caches, socket buffers grown
            worker.block()
        for r in range(rounds):
            before = worker.block() * per_byte
            base.costs.append(before)
            for c in traced[r % len(traced) :] + traced[: r % len(traced)]:
                with attached(c):
                    cost = worker.block() * per_byte
                after = worker.block() * per_byte
                base.costs.append(after)
                c.costs.append(cost)
                c.ratios.append(cost / ((before + after) / 2))
                before = after
            if r % 10 == 9:
                print(
                    f"  round {r + 1}: " + ", ".join(f"{statistics.median(c.ratios):.3f}" for c in traced), flush=True
                )
        with empty_programs() as floor_ids, bpf_stats():
            for c in traced:
                if not isinstance(c.session, KernelSession):
                    continue  # the empty programs' own floor is themselves
                ids = set(c.session.program_ids().values())
                before_stats, e_before = prog_stats(ids), prog_stats(floor_ids)
                with attached(c):
                    for _ in range(stats_blocks):
                        worker.block()
                c.stats = delta(prog_stats(ids), before_stats)
                c.empty = delta(prog_stats(floor_ids), e_before)
                c.floor = floor_ns(c.stats, c.empty)
                c.stats_bytes = stats_blocks * worker.block_bytes


def delta(after: dict[str, tuple[int, int]], before: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    return {n: (r - before.get(n, (0, 0))[0], t - before.get(n, (0, 0))[1]) for n, (r, t) in after.items()}


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return q[0], statistics.median(values), q[2]


def ratio_table(cs: list[Contender], extra: tuple[str, Callable[[Contender], str]] | None = None) -> list[str]:
    """The contenders' markdown table: CPU per byte, median ratio to untraced (cs[0]) with
    its quartiles, blocks; `extra`: (header, cell of a contender) as a last column."""
    head, cell = extra if extra else ("", lambda c: "")
    more = f" | {head}" if extra else ""
    base = cs[0]
    out = [
        f"| contender | CPU per byte (median of its blocks) | ratio to untraced (median) | quartiles | blocks{more} |",
        "|---|---|---|---|---|" + ("---|" if extra else ""),
        f"| untraced | {statistics.median(base.costs):.3f} ns | 1.000 | – | {len(base.costs)}{' | –' if extra else ''} |",
    ]
    for c in cs[1:]:
        lo, med, hi = quartiles(c.ratios)
        tail = f" | {cell(c)}" if extra else ""
        out.append(
            f"| {c.name} | {statistics.median(c.costs):.3f} ns | {med:.3f} | {lo:.3f} – {hi:.3f} | {len(c.ratios)}{tail} |"
        )
    return out

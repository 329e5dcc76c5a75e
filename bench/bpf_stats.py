"""In-kernel time of BPF programs for the collector benchmark: the kernel's own run-time
statistics (kernel.bpf_stats_enabled), the empty programs that give the floor, and the
table that reports the share (bench/bench_collect.py's "In-kernel time" paragraph).

Split out of bench_collect.py, which measures throughput; this measures where the time
goes. Keep in sync with: bench/empty_programs.bpf.c, bench/bench_collect.py.
"""

from __future__ import annotations

import json
import platform
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# (share, floor share, nettrail's per-program stats, the empty programs' stats)
Share = tuple[float, float, dict[str, tuple[int, int]], dict[str, tuple[int, int]]]


@contextmanager
def bpf_stats() -> Iterator[None]:
    """kernel.bpf_stats_enabled for the block: each program's run count and run time (it
    costs two clock reads per run, so the throughput rounds run without it)."""
    subprocess.run(["sysctl", "-q", "kernel.bpf_stats_enabled=1"], check=True)
    try:
        yield
    finally:
        subprocess.run(["sysctl", "-q", "kernel.bpf_stats_enabled=0"], check=True)


def prog_stats(ids: set[int]) -> dict[str, tuple[int, int]]:
    """name -> (run_cnt, run_time_ns) of the given program ids."""
    out = subprocess.run(["bpftool", "-j", "prog", "list"], capture_output=True, text=True).stdout
    return {
        p["name"]: (int(p.get("run_cnt", 0)), int(p.get("run_time_ns", 0)))
        for p in json.loads(out or "[]")
        if p["id"] in ids
    }


def floor_ns(stats: dict[str, tuple[int, int]], floor: dict[str, tuple[int, int]]) -> float:
    """What the runs in `stats` would have cost at the empty programs' time per run on the
    same tracepoints (`floor`, named e_<tracepoint>): the cost of attaching, no work done."""
    total = 0.0
    for prog, (runs, _) in stats.items():
        e_runs, e_ns = floor.get(f"e_{prog}", (0, 0))
        total += runs * e_ns / e_runs if e_runs else 0.0
    return total


def per_program(stats: dict[str, tuple[int, int]], floor: dict[str, tuple[int, int]], least: int = 1000) -> str:
    """ "name runs, ns per run (the empty program's)" of the programs that ran at least
    `least` times, the costliest in total first."""
    busy = sorted(((n, c, t) for n, (c, t) in stats.items() if c >= least), key=lambda x: -x[2])
    per = []
    for n, c, t in busy:
        e_runs, e_ns = floor.get(f"e_{n}", (0, 0))
        per.append(f"{n} {c:,}, {t / c:,.0f}" + (f" ({e_ns / e_runs:,.0f})" if e_runs else ""))
    return "; ".join(per)


EMPTY_PROGRAMS = Path(__file__).with_name("empty_programs.bpf.c")


def bpf_prog_ids(prefix: str) -> set[int]:
    out = subprocess.run(["bpftool", "-j", "prog", "list"], capture_output=True, text=True).stdout
    return {p["id"] for p in json.loads(out or "[]") if p.get("name", "").startswith(prefix)}


def compile_empty(out_dir: Path) -> Path:
    """bench/empty_programs.bpf.c compiled into out_dir."""
    obj_path = out_dir / "empty_programs.bpf.o"
    include = f"-I/usr/include/{platform.machine()}-linux-gnu"
    cmd = ["clang", "-g", "-O2", "-target", "bpf", include, "-c", str(EMPTY_PROGRAMS), "-o", str(obj_path)]
    subprocess.run(cmd, check=True)
    return obj_path


@contextmanager
def empty_programs() -> Iterator[set[int]]:
    """bench/empty_programs.bpf.c compiled, loaded and attached for the block; yields their ids."""
    before = bpf_prog_ids("e_")
    with EmptyHooks(None) as hooks:
        hooks.attach_programs()
        yield bpf_prog_ids("e_") - before


class EmptyHooks:
    """The empty programs on the given tracepoints (None: all of them), loaded for the
    block and attached on demand: what the dispatch of those hooks costs the traffic with
    no work done, measured like any contender (bench/cpu_cost.py). Has the two methods
    of a KernelSession that cpu_cost's contenders use."""

    def __init__(self, tracepoints: frozenset[str] | None) -> None:
        from collector.bpf import libbpf

        self.lib = libbpf.get()
        self.tracepoints = tracepoints
        self.obj = 0
        self.links: list[int] = []
        self._tmp = tempfile.TemporaryDirectory()

    def __enter__(self) -> EmptyHooks:
        obj = self.lib.bpf_object__open_file(str(compile_empty(Path(self._tmp.name))).encode(), None)
        if not obj:
            raise RuntimeError("empty programs did not open")
        self.obj = obj
        prog = self.lib.bpf_object__next_program(obj, None)
        while prog:
            name = self.lib.bpf_program__name(prog).decode().removeprefix("e_")
            self.lib.bpf_program__set_autoload(prog, self.tracepoints is None or name in self.tracepoints)
            prog = self.lib.bpf_object__next_program(obj, prog)
        if self.lib.bpf_object__load(obj):
            raise RuntimeError(f"empty programs did not load: {''.join(self.lib.take_messages()[-5:])}")
        return self

    def attach_programs(self) -> None:
        from collector.bpf import libbpf

        prog = self.lib.bpf_object__next_program(self.obj, None)
        while prog:
            if self.lib.bpf_program__autoload(prog):
                self.links.append(libbpf.check_ptr(self.lib.bpf_program__attach(prog), "attach an empty program"))
            prog = self.lib.bpf_object__next_program(self.obj, prog)

    def detach(self) -> None:
        for link in reversed(self.links):
            self.lib.bpf_link__destroy(link)
        self.links.clear()

    def __exit__(self, *exc: object) -> None:
        self.detach()
        if self.obj:
            self.lib.bpf_object__close(self.obj)
        self._tmp.cleanup()


def share_lines(shares: dict[str, Share]) -> list[str]:
    lines = [
        "In-kernel time (`sysctl kernel.bpf_stats_enabled=1`, one more transfer per contender): the programs' total "
        "run time over the transfer's wall time, i.e. the share of the traffic CPU spent inside nettrail's "
        "programs. Empty programs (`bench/empty_programs.bpf.c`) attached to the same tracepoints in the same "
        "transfer give the floor: what the same number of runs costs with no work in them (the statistics' two "
        "clock reads per run, the dispatch, the cold caches after each 64 KiB copy). The throughput ratios above "
        "are the measure of the targets; this says where the time goes.",
        "",
        "| contender | in-kernel share of the traffic CPU | floor (empty programs, same runs) | nettrail's own work "
        "| per program: runs, ns per run (empty program's) |",
        "|---|---|---|---|---|",
    ]
    for name, (share, floor_share, stats, floor) in shares.items():
        per = per_program(stats, floor)
        lines.append(f"| {name} | {share:.2%} | {floor_share:.2%} | {share - floor_share:.2%} | {per} |")
    return [*lines, ""]

"""H4 self-overhead: the collector's whole cost and event rate, one record per interval.

CPU time is the process's user + system time (every thread: the HTTP sink's and the
webhook's too) from getrusage(RUSAGE_SELF), the same per-process accounting as the
utime + stime fields of /proc/PID/stat. ``cpu_percent`` is the interval's CPU time
over its wall-clock length, in percent of one CPU. The rest of the agent's cost is
beside it: its children's CPU (the ring keeper: those alive from /proc, those ended
from getrusage(RUSAGE_CHILDREN)) and its programs' kernel time (run_time_ns of the
session's programs, collector/health/programs.py); ``agent_cpu_percent`` is the three
together, null while the programs' time is unknown. Events are those read from the ring
buffer (KernelSource.received, by event type); records are what the collector emitted.
Keep in sync with translators.records.CollectorStats, rule H4
(analysis/alerts/rules/health.py) and docs/collector.md.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from collector.bpf import layout
from collector.health import process_comm
from collector.health.programs import ProgramClock, ProgramInfos
from translators.kernel import KernelEnv, KernelRecord, collector_envelope
from translators.records import CollectorStats

DEFAULT_INTERVAL_S = 10.0
PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds() -> float:
    """User + system CPU time of this process (all threads) so far."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def children_cpu_seconds() -> float:
    """User + system CPU time of this process's children so far: those it reaped
    (RUSAGE_CHILDREN) and those still running (/proc, in clock ticks, with what they reaped)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    ticks = 0
    for pid in live_children():
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended meanwhile: RUSAGE_CHILDREN has it once reaped
        ticks += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return ru.ru_utime + ru.ru_stime + ticks / TICK


def live_children() -> list[int]:
    """Pids of this process's running children (every thread's, /proc/PID/task/TID/children)."""
    pids: list[int] = []
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return pids
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.extend(int(p) for p in f.read().split())
        except (OSError, ValueError):
            continue  # the thread ended meanwhile
    return pids


def rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return None


class OverheadMeter:
    """Measures one interval at a time; ``received`` returns the ring's per-type event
    counts, ``programs`` the session's programs' bpf_prog_info (None: no programs)."""

    def __init__(
        self, received: Callable[[], np.ndarray], interval_s: float = DEFAULT_INTERVAL_S,
        programs: ProgramInfos | None = None,
    ) -> None:  # fmt: skip
        self.received = received
        self.programs = ProgramClock(programs)  # turns the kernel's run-time statistics on
        self.programs0 = self.programs.read()
        self.interval_s = interval_s
        self.pid = os.getpid()
        self.comm = process_comm()
        self.t0 = time.monotonic()
        self.cpu0 = cpu_seconds()
        self.children0 = children_cpu_seconds()
        self.events0 = received().copy()
        self.records = 0

    def count(self, records: int) -> None:
        self.records += records

    def due(self, final: bool) -> bool:
        return final or time.monotonic() - self.t0 >= self.interval_s

    def record(self, env: KernelEnv, stopped: bool = False, **polls: Any) -> KernelRecord:
        """The interval's CollectorStats (`stopped`: the collector's last; `polls`: siftr-poll's
        poll_interval_s and poll_missed); starts the next interval."""
        now, cpu, events = time.monotonic(), cpu_seconds(), self.received().copy()
        children, progs = children_cpu_seconds(), self.programs.read()
        wall = max(now - self.t0, 1e-9)
        used = cpu - self.cpu0
        children_used = max(children - self.children0, 0.0)  # /proc ticks, then µs once reaped
        prog_ns = prog_runs = agent = None
        if progs is not None and self.programs0 is not None:
            prog_ns, prog_runs = progs[0] - self.programs0[0], progs[1] - self.programs0[1]
            agent = round(100.0 * (used + children_used + prog_ns / 1e9) / wall, 3)
        moved = events - self.events0
        by_type = {layout.EVENT_NAMES.get(t, f"type {t}"): int(moved[t]) for t in np.flatnonzero(moved).tolist()}
        total = int(moved.sum())
        rec = CollectorStats(
            **collector_envelope(env, "stats", "collector/getrusage"), pid=self.pid, tgid=self.pid,
            comm=self.comm, interval_s=round(wall, 6), cpu_time_s=round(used, 6), cpu_total_s=round(cpu, 6),
            cpu_percent=round(100.0 * used / wall, 3), events=total, events_per_s=round(total / wall, 3),
            records=self.records, events_by_type=by_type, rss_bytes=rss_bytes(), stopped=stopped or None,
            children_cpu_time_s=round(children_used, 6), children_cpu_total_s=round(children, 6),
            programs_run_time_ns=prog_ns, programs_run_count=prog_runs,
            programs_run_time_total_ns=None if progs is None else progs[0], agent_cpu_percent=agent, **polls,
        )  # fmt: skip
        self.t0, self.cpu0, self.events0, self.records = now, cpu, events, 0
        self.children0, self.programs0 = children, progs
        return rec

"""H4 self-overhead: the collector's own CPU share and event rate, one record per interval.

CPU time is the process's user + system time (every thread: the HTTP sink's and the
webhook's too) from getrusage(RUSAGE_SELF), the same per-process accounting as the
utime + stime fields of /proc/PID/stat. ``cpu_percent`` is the interval's CPU time
over its wall-clock length, in percent of one CPU. Events are those read from the ring
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
from translators.kernel import KernelEnv, KernelRecord, collector_envelope
from translators.records import CollectorStats

DEFAULT_INTERVAL_S = 10.0
PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_seconds() -> float:
    """User + system CPU time of this process (all threads) so far."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return None


class OverheadMeter:
    """Measures one interval at a time; ``received`` returns the ring's per-type event counts."""

    def __init__(self, received: Callable[[], np.ndarray], interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.received = received
        self.interval_s = interval_s
        self.pid = os.getpid()
        self.comm = process_comm()
        self.t0 = time.monotonic()
        self.cpu0 = cpu_seconds()
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
        wall = max(now - self.t0, 1e-9)
        used = cpu - self.cpu0
        moved = events - self.events0
        by_type = {layout.EVENT_NAMES.get(t, f"type {t}"): int(moved[t]) for t in np.flatnonzero(moved).tolist()}
        total = int(moved.sum())
        rec = CollectorStats(
            **collector_envelope(env, "stats", "collector/getrusage"), pid=self.pid, tgid=self.pid,
            comm=self.comm, interval_s=round(wall, 6), cpu_time_s=round(used, 6), cpu_total_s=round(cpu, 6),
            cpu_percent=round(100.0 * used / wall, 3), events=total, events_per_s=round(total / wall, 3),
            records=self.records, events_by_type=by_type, rss_bytes=rss_bytes(), stopped=stopped or None, **polls,
        )  # fmt: skip
        self.t0, self.cpu0, self.events0, self.records = now, cpu, events, 0
        return rec

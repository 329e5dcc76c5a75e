"""The kernel time of the collector's own eBPF programs, for H4 (collector_stats).

The kernel counts each program's runs and the time spent in them (bpf_prog_info's
run_cnt and run_time_ns) only while run-time statistics are enabled. The collector
enables them with the bpf() command BPF_ENABLE_STATS (libbpf's bpf_enable_stats): the
statistics stay on for as long as the returned file descriptor is open, so they end with
the collector however it ends, and `sysctl kernel.bpf_stats_enabled` is left alone. The
descriptor is opened once per process and kept (a swap of programs keeps the statistics
on). What it costs: while any holder keeps them on, every run of every BPF program on
the host, not only ours, takes two more clock reads and a per-CPU counter update
(tens of ns a run; docs/benchmarks.md, "The agent's whole cost"). A kernel that refuses
(no CAP_SYS_ADMIN, a kernel before 5.8) leaves the programs' time unknown: null, not 0.
Keep in sync with collector/health/overhead.py, translators.records.CollectorStats and
bench/bpf_stats.py (the benchmarks' sysctl-wide switch).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping

from collector.bpf import libbpf

BPF_STATS_RUN_TIME = 0  # enum bpf_stats_type (include/uapi/linux/bpf.h)

# name -> the kernel's bpf_prog_info of each program the session loaded
ProgramInfos = Callable[[], Mapping[str, libbpf.BpfProgInfo]]


@functools.cache
def enable_stats() -> int | str:
    """The descriptor that keeps the kernel's run-time statistics on (kept for the
    process's life), or why the kernel refused them."""
    fd = int(libbpf.get().bpf_enable_stats(BPF_STATS_RUN_TIME))
    if fd < 0:  # libbpf 1.x returns -errno
        return f"failed to enable BPF run-time statistics: {os.strerror(-fd)} (needs CAP_SYS_ADMIN, Linux 5.8)"
    os.set_inheritable(fd, False)
    return fd


def stats_refused() -> str | None:
    """Why the programs' time is unknown, or None when the statistics are on."""
    got = enable_stats()
    return got if isinstance(got, str) else None


def totals(infos: Mapping[str, libbpf.BpfProgInfo]) -> tuple[int, int]:
    """(run_time_ns, run_cnt) summed over the programs."""
    return sum(int(i.run_time_ns) for i in infos.values()), sum(int(i.run_cnt) for i in infos.values())


class ProgramClock:
    """The programs' (run_time_ns, run_cnt) since they were loaded, or None while unknown."""

    def __init__(self, infos: ProgramInfos | None) -> None:
        self.infos = infos
        self.refused = stats_refused() if infos is not None else "no programs"

    def read(self) -> tuple[int, int] | None:
        if self.infos is None or self.refused is not None:
            return None
        return totals(self.infos())

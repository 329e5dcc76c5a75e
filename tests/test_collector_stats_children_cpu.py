"""H4 counts the collector's children: the CPU a child process (the ring keeper is one)
used in an interval is in that interval's collector_stats, whether the child is still
running when the interval ends (read from /proc) or has ended and been reaped
(getrusage(RUSAGE_CHILDREN)); without programs the programs' time is unknown (null)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from collector.bpf import layout
from collector.health.overhead import TICK, OverheadMeter
from translators.kernel import KernelEnv
from translators.records import CollectorStats

ENV = KernelEnv(host_id="h", boot_id="b", wall_offset=0.0)
# burns 0.3 s of CPU, says how much it used, then waits for a line (or EOF) before leaving
BURN = """
import sys, time
end = time.process_time() + 0.3
while time.process_time() < end:
    pass
print(time.process_time(), flush=True)
sys.stdin.readline()
"""


def meter() -> OverheadMeter:
    return OverheadMeter(lambda: np.zeros(layout.EV_MAX, dtype=np.int64), 3600.0)


def record(m: OverheadMeter) -> CollectorStats:
    rec = m.record(ENV)
    assert isinstance(rec, CollectorStats)
    return rec


def test_a_running_childs_cpu_is_in_the_interval_and_moves_to_the_ended_ones_when_reaped() -> None:
    m = meter()
    child = subprocess.Popen([sys.executable, "-c", BURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdin is not None
    burned = float(child.stdout.readline())  # its CPU so far, the interpreter's start-up included
    running = record(m)
    assert running.children_cpu_time_s is not None
    # /proc counts whole clock ticks: at most one short per counter, and the child runs on a little
    assert burned - 2.0 / TICK <= running.children_cpu_time_s <= burned + 0.1
    child.communicate("\n", timeout=60)
    ended = record(m)
    assert ended.children_cpu_time_s is not None and ended.children_cpu_total_s is not None
    # reaped, its exact total replaces the ticks /proc gave: what is left is its last moments
    assert 0.0 <= ended.children_cpu_time_s <= 2.0 / TICK + 0.1
    assert ended.children_cpu_total_s == pytest.approx(
        running.children_cpu_total_s + ended.children_cpu_time_s, abs=2e-6
    )


def test_without_programs_their_time_is_unknown_and_so_is_the_agents_whole_cost() -> None:
    rec = record(meter())
    assert (rec.programs_run_time_ns, rec.programs_run_count, rec.programs_run_time_total_ns) == (None, None, None)
    assert rec.agent_cpu_percent is None
    assert rec.children_cpu_time_s == 0.0

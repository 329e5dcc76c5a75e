"""H4 counts the programs' kernel time: each collector_stats carries the run time and runs
of the collector's own eBPF programs over its interval, as the kernel's bpf_prog_info
counts them (BPF_ENABLE_STATS, held by the collector), and the agent's whole cost beside
its own CPU. Exact identities against bpftool, an independent reader of the same counters,
once the programs are detached and can run no more. Needs root and BTF.

The statistics stay on for the rest of this pytest process (the collector keeps them for
its life, collector/health/programs.py): later tests' programs only run a little slower.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collector.health.reporter import SelfHealth
from tests.collect_process import Collector
from tests.kernel_support import RING_EVENTS, kernel, short_connections, tracing
from translators.records import CollectorStats, from_json

pytestmark = kernel
ROOT = Path(__file__).resolve().parents[1]


def bpftool_runs(ids: set[int]) -> tuple[int, int]:
    """(run_time_ns, run_cnt) summed over these program ids, as bpftool reads them."""
    out = subprocess.run(["bpftool", "-j", "prog", "list"], capture_output=True, text=True, check=True).stdout
    progs = [p for p in json.loads(out or "[]") if int(p["id"]) in ids]
    assert {int(p["id"]) for p in progs} == ids
    return sum(int(p.get("run_time_ns", 0)) for p in progs), sum(int(p.get("run_cnt", 0)) for p in progs)


def stats(health: SelfHealth) -> CollectorStats:
    [rec] = [r for r in health.add([], final=True) if r.kind == "collector_stats"]
    assert isinstance(rec, CollectorStats)
    return rec


def test_each_interval_carries_the_kernel_time_and_runs_of_the_collectors_own_programs() -> None:
    with tracing(("tcp",)) as cap:
        cap.settle()
        health = SelfHealth(cap.source, cap.source.env, 3600.0)  # turns the statistics on
        start_runs = health.overhead.programs0
        # events other traffic made before the meter's start and not read yet (read in its
        # first interval, their runs before it); nothing reads the ring meanwhile
        counts = cap.session.counters().sum(axis=0)[:, :RING_EVENTS]
        pending = int(counts[0].sum() - counts[1].sum() - cap.source.received[:RING_EVENTS].sum())
        assert start_runs is not None, health.overhead.programs.refused
        ids = set(cap.session.program_ids().values())
        short_connections(40, 100)
        cap.settle()
        first = stats(health)
        short_connections(40, 100)
        cap.settle()
        cap.session.detach()  # nothing runs them any more: their counters are final
        last = stats(health)
        kernel_ns, kernel_runs = bpftool_runs(ids)

    for rec in (first, last):
        assert rec.programs_run_time_ns is not None and rec.programs_run_count is not None
        assert rec.events >= 40  # the interval's connections were traced
        assert rec.programs_run_time_ns > 0
        assert rec.children_cpu_time_s == 0.0  # an in-process session starts no child
        whole = rec.cpu_time_s + rec.children_cpu_time_s + rec.programs_run_time_ns / 1e9
        assert rec.agent_cpu_percent == pytest.approx(100 * whole / rec.interval_s, rel=1e-3, abs=1e-3)
    # the intervals chain up to the kernel's own totals, to the nanosecond and the run
    assert last.programs_run_time_total_ns == kernel_ns
    assert first.programs_run_time_total_ns is not None
    assert last.programs_run_time_total_ns - first.programs_run_time_total_ns == last.programs_run_time_ns
    assert first.programs_run_count + last.programs_run_count == kernel_runs - start_runs[1]
    assert first.programs_run_time_ns + last.programs_run_time_ns == kernel_ns - start_runs[0]
    # each event read came from one run of one of these programs (a run may emit none)
    assert first.events + last.events <= first.programs_run_count + last.programs_run_count + pending


def test_nettrail_collect_reports_its_programs_time_in_every_interval(tmp_path: Path) -> None:
    """The command, not only the meter: each collector_stats of a real run has the
    programs' time and runs, chained interval to interval, and the whole cost beside
    the process's CPU."""
    out = tmp_path / "records.jsonl"
    with Collector("--providers", "tcp", "--stats-interval", "0.5", "--out", str(out)) as collector:
        collector.wait_attached()
        end = time.monotonic() + 2.0  # several 0.5 s intervals, each with connections in it
        while time.monotonic() < end:
            short_connections(20, 100)
        status, _, err = collector.stop()
    assert status == 0, err
    stats = [r for r in map(from_json, out.read_text().splitlines()) if isinstance(r, CollectorStats)]
    assert len(stats) >= 2  # a 0.5 s interval passed at least once, and the last at the stop
    for r in stats:
        assert r.programs_run_time_ns is not None and r.programs_run_count is not None, r
        assert r.agent_cpu_percent is not None and r.agent_cpu_percent >= r.cpu_percent
    for a, b in zip(stats, stats[1:], strict=False):
        assert b.programs_run_time_total_ns is not None and a.programs_run_time_total_ns is not None
        assert b.programs_run_time_total_ns - a.programs_run_time_total_ns == b.programs_run_time_ns
    assert sum(r.events for r in stats) >= 100  # the connections were traced, and their runs counted
    assert sum(r.programs_run_count or 0 for r in stats) >= 100


REFUSED = """
import os
from collector.health.overhead import OverheadMeter
import numpy as np
from collector.bpf import layout
from translators.kernel import KernelEnv
os.setgid(65534); os.setuid(65534)  # nobody: no CAP_SYS_ADMIN
m = OverheadMeter(lambda: np.zeros(layout.EV_MAX, dtype=np.int64), 3600.0, programs=lambda: {})
r = m.record(KernelEnv(host_id="h", boot_id="b", wall_offset=0.0))
print(m.programs.refused)
print(r.programs_run_time_ns, r.programs_run_count, r.programs_run_time_total_ns, r.agent_cpu_percent)
"""


def test_a_kernel_that_refuses_the_statistics_leaves_the_programs_time_unknown_not_zero() -> None:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", REFUSED], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    why, fields = out.stdout.splitlines()
    assert why == "failed to enable BPF run-time statistics: Operation not permitted (needs CAP_SYS_ADMIN, Linux 5.8)"
    assert fields == "None None None None"

"""Reports stream: a 100,000-record report costs no more memory than a 2,000-record one.

Each database is filled by bench/bench_report.py (the ingest path's bulk insert) in
a child process; `nettrail report --libxo json` then runs as its own child and its
peak RSS comes from wait4(). If the report materialised its records (as Structs or
as output text), the big one would need well over 100 MiB more.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "bench_report.py"
SMALL, BIG = 2_000, 100_000
SLACK_KIB = 48 * 1024  # SQLite page cache (up to 32 MiB per connection), allocator noise, template caches


def child_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    env["NETTRAIL_DATA"] = str(data_dir)
    env["PYTHONPATH"] = str(ROOT)
    return env


def fill(data_dir: Path, records: int) -> None:
    data_dir.mkdir()
    subprocess.run([sys.executable, str(BENCH), "populate", str(data_dir), str(records), "--connections", "50"],
                   check=True, env=child_env(data_dir), timeout=300)  # fmt: skip


def report_peak_rss(data_dir: Path) -> tuple[int, int]:
    """(bytes written, peak RSS in KiB) of `nettrail report --libxo json` over data_dir."""
    out_path = data_dir / "report.json"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nettrail.cli", "report", "--libxo", "json"], stdout=out, env=child_env(data_dir)
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0
    return out_path.stat().st_size, usage.ru_maxrss


@pytest.mark.slow
def test_a_big_report_streams_in_bounded_memory(tmp_path: Path) -> None:
    fill(tmp_path / "small", SMALL)
    fill(tmp_path / "big", BIG)
    small_bytes, small_rss = report_peak_rss(tmp_path / "small")
    big_bytes, big_rss = report_peak_rss(tmp_path / "big")
    assert big_bytes > 40 * small_bytes  # the big report really is ~50 times bigger ...
    assert big_bytes > 150 * 1024 * 1024 // 2  # ... tens of MiB of output
    assert big_rss - small_rss < SLACK_KIB, (small_rss, big_rss)  # ... in the same memory

"""tests/skip_gate.py: a kernel test skipped where root and BTF are present fails the run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kernel_support import bpf_skip_reason

TESTS = Path(__file__).parent
CASES = """
import pytest

@pytest.mark.kernel
def test_marked_kernel_skips():
    pytest.skip("the BPF object did not load")

def test_unmarked_skips_for_tracefs():
    pytest.skip("tracefs is not mounted at /sys/kernel/tracing")

@pytest.mark.kernel
def test_opted_out():
    pytest.skip("NETTRAIL_KERNEL_MATRIX=0: the Debian 6.1 and 6.12 guests are not booted")

def test_skips_for_postgres():
    pytest.skip("pgbulk is PostgreSQL's (run with -m postgres and DATABASE_URL)")

def test_passes():
    pass
"""
# The same run without the two kernel skips: an opt-out and a PostgreSQL-only skip remain.
NOT_THE_KERNELS = "\n\n".join(
    part for part in CASES.split("\n\n") if "test_marked_kernel_skips" not in part and "tracefs" not in part
)
INI = """
[pytest]
markers =
    kernel: needs root and BPF
"""


def _run(tmp_path: Path, cases: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_cases.py").write_text(cases)
    (tmp_path / "pytest.ini").write_text(INI)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "skip_gate", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env={"PYTHONPATH": f"{TESTS}:{TESTS.parent}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_skipped_kernel_test_fails_the_run_where_the_kernel_tests_can_run(tmp_path: Path) -> None:
    run = _run(tmp_path, CASES)
    assert "1 passed, 4 skipped" in run.stdout, run.stdout + run.stderr
    named = [line for line in run.stdout.splitlines() if line.startswith("test_cases.py::")]
    if bpf_skip_reason() is None:
        assert run.returncode == 1, run.stdout
        assert named == [
            "test_cases.py::test_marked_kernel_skips: the BPF object did not load",
            "test_cases.py::test_unmarked_skips_for_tracefs: tracefs is not mounted at /sys/kernel/tracing",
        ]
    else:  # without root or BTF the kernel tests skip with their reason, as the README says
        assert run.returncode == 0, run.stdout
        assert named == []


def test_a_run_whose_skips_are_not_the_kernels_passes(tmp_path: Path) -> None:
    run = _run(tmp_path, NOT_THE_KERNELS)
    assert "1 passed, 2 skipped" in run.stdout, run.stdout + run.stderr
    assert run.returncode == 0, run.stdout

"""The kernel tests' gate: where this machine can run them, a skipped kernel test fails the run.

A kernel test that skips reports "s" and pytest's exit code stays 0, so a run on a machine
with root and kernel BTF could go green without having traced anything (tracefs not
mounted, a tool not installed, the BPF object refused). Here, when the loader has what it
needs (tests/kernel_support.py's bpf_skip_reason() is None), every skipped test that is
marked `kernel` or `matrix`, or whose reason names what only a kernel test needs (root,
BTF, BPF, tracefs, a capability), is listed by name and reason and turns the run's exit
status into a failure. Only an explicit opt-out the person running the tests chose
(NETTRAIL_KERNEL_MATRIX=0, NETTRAIL_MATRIX_KERNELS) passes. Registered by tests/conftest.py.
"""

from __future__ import annotations

import re

import pytest

# Words a skip reason uses when it is about the kernel side (root, BTF, BPF, tracefs,
# capabilities): such a skip on a machine with root and BTF means a kernel test did not run.
# "needs root", not "root": a reason may quote a path under /root.
KERNEL_REASON = re.compile(r"needs root|\bBTF\b|\be?BPF\b|tracefs|\bCAP_[A-Z_]+")
# Opt-outs a person asks for by name; CI sets neither.
OPT_OUTS = ("NETTRAIL_KERNEL_MATRIX=0", "NETTRAIL_MATRIX_KERNELS=")
KERNEL_MARKS = frozenset({"kernel", "matrix"})

_skipped: list[tuple[str, str]] = []


def _gate_active() -> bool:
    # Imported here: kernel_support pulls in the loader, which only kernel runs need at import.
    from kernel_support import bpf_skip_reason

    return bpf_skip_reason() is None


def _reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = _reason(report)
    if any(opt_out in reason for opt_out in OPT_OUTS):
        return
    if KERNEL_MARKS & set(report.keywords) or KERNEL_REASON.search(reason):
        _skipped.append((report.nodeid, reason))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _skipped and _gate_active():
        terminalreporter.section("kernel tests skipped on a machine that can run them", red=True)
        for nodeid, reason in _skipped:
            terminalreporter.line(f"{nodeid}: {reason}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skipped and _gate_active() and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

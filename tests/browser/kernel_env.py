"""What the kernel browser tests (test_dashboard_*_kernel.py) share: their skip reasons, and
`nettrail collect` (eBPF, root) shipping as the browser tests' HOST to the test webapp
through the real ingest API, its log in a file (a pipe nobody reads would fill and stop
the collector), stopped by SIGINT however the test ends.
Keep in sync with: nettrail/commands/collect.py (its options and its "tracing" line).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import HOST, ROOT, Server

WARMUP_S = 120.0  # the collector may first compile kmod/ (fresh checkout), then loads its programs
STOP_S = 30.0  # a collector flushes what it holds to the webapp before it exits


def need_root_and_btf(why: str) -> None:
    """Skip the test unless it runs as root on a kernel with BTF."""
    if os.geteuid() != 0:
        pytest.skip(f"needs root ({why})")
    if not Path("/sys/kernel/btf/vmlinux").exists():
        pytest.skip("needs kernel BTF (/sys/kernel/btf/vmlinux)")


@dataclass
class Collector:
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self, tail: int = 3000) -> str:
        """The end of what the collector wrote to stderr (for failure messages)."""
        return self.log_path.read_text(errors="replace")[-tail:]

    def wait_tracing(self, timeout: float = WARMUP_S) -> None:
        """Until the collector says its programs are tracing; fails if it ends or the time is up."""
        deadline = time.monotonic() + timeout
        while "tracing" not in self.log_path.read_text(errors="replace"):
            assert self.proc.poll() is None, f"nettrail collect ended: {self.log()}"
            assert time.monotonic() < deadline, f"nettrail collect did not start tracing in {timeout} s: {self.log()}"
            time.sleep(0.2)


@contextmanager
def collecting(server: Server, data: Path, *options: str, host: str = HOST) -> Iterator[Collector]:
    """`nettrail collect --server ... <options>` with its NETTRAIL_DATA, spool and log under
    `data`, shipping as `host` (a host of its own keeps its records, stack counters
    included, off the pages other tests check for HOST)."""
    token = server.token if host == HOST else server.make_token(host)
    env = {**os.environ, "NETTRAIL_HOST_ID": host, "NETTRAIL_DATA": str(data)}
    cmd = [sys.executable, "-m", "nettrail.cli", "collect", "--server", server.url, "--token", token]
    cmd += ["--spool", str(data / "spool"), *options]
    log_path = data / "collector.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=log)
    try:
        yield Collector(proc, log_path)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    refused = sorted((data / "spool" / "rejected").glob("*.error"))
    # a batch the ingest API refused is lost to the dashboard: every story test would then
    # check numbers short by its records, so say which value the server refused instead
    assert not refused, f"ingest refused {len(refused)} batches, first: {refused[0].read_text()}"

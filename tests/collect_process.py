"""Run `nettrail collect` as a child process for the command tests: start, wait until attached, stop."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class Collector:
    def __init__(self, *args: str, netns: str | None = None) -> None:
        """netns: run the collector inside that named network namespace (ip netns exec)."""
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        inside = ["ip", "netns", "exec", netns] if netns else []
        self.proc = subprocess.Popen(
            [*inside, sys.executable, "-m", "nettrail.cli", "collect", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.stderr_lines: list[str] = []

    def wait_attached(self, timeout: float = 120.0) -> dict[str, int]:
        """Program name -> id, from the line collect prints once everything is attached.
        Reads the pipe's fd directly: a buffered readline() could pull later lines into
        Python's buffer, where select() no longer sees them. The timeout is a bound, not a
        speed claim: loading and verifying every program took over 30 s in a CI run on a
        2-CPU machine busy with other work."""
        assert self.proc.stderr is not None
        fd = self.proc.stderr.fileno()
        sel = selectors.DefaultSelector()
        sel.register(fd, selectors.EVENT_READ)
        pending = b""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if b"\n" not in pending:
                if not sel.select(timeout=max(0.0, end - time.monotonic())):
                    break
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                pending += chunk
                continue
            raw, pending = pending.split(b"\n", 1)
            line = raw.decode() + "\n"
            self.stderr_lines.append(line)
            if "(programs " in line:
                self.stderr_lines.append(pending.decode())  # whatever followed in the same read
                return {name: int(pid) for name, pid in re.findall(r"(\w+)#(\d+)", line)}
        self.stderr_lines.append(pending.decode())
        raise AssertionError(f"collect did not attach: {''.join(self.stderr_lines)}")

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        """Never leave a collector (and its attached programs) behind when a test fails."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()

    def stop(self, signum: int = signal.SIGINT, timeout: float = 30.0) -> tuple[int, bytes, str]:
        self.proc.send_signal(signum)
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, "".join(self.stderr_lines) + err.decode()

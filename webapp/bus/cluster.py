"""Several processes, one command: N web/ingest workers on one socket and M writers, kept running.

The parent opens the listening socket once and every worker (``python -m
webapp.serve --fd N``) accepts on the inherited descriptor, so no balancer is
needed in front of them on one machine. Writers (``python -m
webapp.bus.writer_main``) are named ``<hostname>-writer-<i>``: a writer restarted in
slot i takes back its own pending entries at once. A child that exits is started
again (at most once a second per slot), so a crashed or killed process costs the
requests it held (the collector's spool resends them) and, for a writer, nothing:
its entries stay pending until it or another writer stores them.
Used by ``nettrail serve`` (nettrail/commands/serve.py); docs/scale-out.md.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)
RESTART_PAUSE = 1.0  # seconds between two starts of one slot: a child failing at start-up cannot spin
STOP_TIMEOUT = 15.0


@dataclass
class Slot:
    name: str  # "worker-0", "writer-1"
    command: list[str]
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restarts: int = 0


@dataclass
class Cluster:
    host: str
    port: int
    workers: int
    writers: int
    env: dict[str, str]
    python: str = sys.executable
    popen: dict[str, Any] = field(default_factory=dict)  # e.g. user/group of an unprivileged child
    slots: list[Slot] = field(default_factory=list)
    _sock: socket.socket | None = None

    def start(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self._sock = socket.create_server((self.host, self.port), family=family, backlog=1024)
        self._sock.set_inheritable(True)
        fd = self._sock.fileno()
        # Every child, writers included, knows the address the webapp listens on: alert mail
        # and the dashboard leave out the sockets toward it (webapp/dashboard/own_traffic.py).
        self.env = {**self.env, "NETTRAIL_WEBAPP_LISTEN": f"{self.host}:{self.port}"}
        prefix = socket.gethostname()
        for i in range(self.workers):
            self.slots.append(Slot(f"worker-{i}", [self.python, "-m", "webapp.serve", "--fd", str(fd)]))
        for i in range(self.writers):
            name = f"{prefix}-writer-{i}"
            self.slots.append(Slot(f"writer-{i}", [self.python, "-m", "webapp.bus.writer_main", "--name", name]))
        for slot in self.slots:
            self._spawn(slot)

    def pids(self) -> dict[str, int]:
        return {slot.name: slot.proc.pid for slot in self.slots if slot.proc is not None and slot.proc.poll() is None}

    def supervise(self, stop: threading.Event) -> None:
        """Restart exited children until `stop` is set; then stop them all."""
        try:
            while not stop.wait(0.2):
                for slot in self.slots:
                    if slot.proc is not None and slot.proc.poll() is not None:
                        if time.monotonic() - slot.started >= RESTART_PAUSE:
                            log.warning("%s exited with status %s; starting it again", slot.name, slot.proc.returncode)
                            slot.restarts += 1
                            self._spawn(slot)
        finally:
            self.stop()

    def stop(self) -> None:
        running = [slot.proc for slot in self.slots if slot.proc is not None and slot.proc.poll() is None]
        for proc in running:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for proc in running:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _spawn(self, slot: Slot) -> None:
        assert self._sock is not None
        slot.started = time.monotonic()
        slot.proc = subprocess.Popen(slot.command, env=self.env, pass_fds=(self._sock.fileno(),), **self.popen)
        print(f"nettrail: {slot.name} started (pid {slot.proc.pid})", flush=True)

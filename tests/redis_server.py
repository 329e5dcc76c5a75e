"""A throw-away redis-server for the bus tests: own port, own directory, AOF on, stopped by PID.

Configured as docs/scale-out.md requires (``appendfsync always``: the ingest tier
refuses batches otherwise); ``appendfsync="everysec"`` makes one it must refuse.
``kill`` is a crash (SIGKILL), ``stop`` a clean shutdown; either keeps the
directory, so ``start`` again reads the same AOF.

Not the shared test Redis (scripts/test-services): the bus tests restart it and
read its stream keys, which must not meet another test's.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    def __init__(self, appendfsync: str = "always", extra: tuple[str, ...] = ()) -> None:
        self.appendfsync = appendfsync
        self.extra = extra  # more redis-server arguments, e.g. ("--rename-command", "CONFIG", "")
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="nettrail-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir)]
        command += ["--appendonly", "yes", "--appendfsync", self.appendfsync, "--save", "", *self.extra]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port)
        for _ in range(100):
            try:
                client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        """A clean shutdown (SIGTERM): Redis flushes its AOF, as a restart by systemd does."""
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
            self.proc = None

    def kill(self) -> None:
        """A crash: SIGKILL, by PID; Redis gets no chance to flush or fsync anything."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=20)
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

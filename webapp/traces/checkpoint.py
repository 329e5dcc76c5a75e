"""SQLite WAL checkpoints in a background thread of the server, not in ingest requests.

By default the writer whose commit takes the WAL past 1,000 pages copies the WAL back
into the database and fsyncs it, inside that request: about a tenth of a bulk
ingest's wall time (docs/benchmarks.md, "Ingest"). In the server (webapp/serve.py) a
daemon thread runs ``PRAGMA wal_checkpoint(PASSIVE)`` every
NETTRAIL_CHECKPOINT_INTERVAL seconds on its own connection (PASSIVE never waits for
readers or writers), and the server's request connections checkpoint themselves only
past SAFETY_NET_PAGES, should the thread fall behind. Other processes (manage.py,
``nettrail analyze --store``, tests) keep SQLite's default.
Keep in sync with: webapp/settings.py (init_command, NETTRAIL_CHECKPOINT_INTERVAL),
webapp/serve.py, bench/bench_ingest.py, docs/webapp.md.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from dataclasses import dataclass, field
from typing import Any

from django.db.backends.signals import connection_created

log = logging.getLogger(__name__)
SAFETY_NET_PAGES = 16384  # 256 MiB of 16 KiB pages before a request checkpoints itself
BUSY_TIMEOUT_MS = 1000


@dataclass
class Checkpointer:
    """The running thread: `last` is the latest (busy, wal frames, frames checkpointed)."""

    path: str
    interval: float
    stop_event: threading.Event = field(default_factory=threading.Event)
    last: tuple[int, int, int] | None = None
    runs: int = 0

    def stop(self) -> None:
        self.stop_event.set()
        connection_created.disconnect(_raise_autocheckpoint)

    def run(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            while not self.stop_event.wait(self.interval):
                self.checkpoint(db)
        finally:
            db.close()

    def checkpoint(self, db: sqlite3.Connection) -> None:
        try:
            row = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error:  # a locked or vanished database: try again next time
            log.exception("WAL checkpoint failed")
            return
        self.last = (int(row[0]), int(row[1]), int(row[2]))
        self.runs += 1


def start_checkpointer(interval: float, path: str) -> Checkpointer:
    """Checkpoint the SQLite database at `path` every `interval` s in a daemon thread.

    From now on, new SQLite connections of this process only checkpoint past the
    safety net. Stop it with `.stop()` (tests, benchmarks).
    """
    connection_created.connect(_raise_autocheckpoint)
    worker = Checkpointer(path=path, interval=interval)
    threading.Thread(target=worker.run, name="nettrail-checkpoint", daemon=True).start()
    return worker


def _raise_autocheckpoint(sender: Any, connection: Any, **kwargs: Any) -> None:
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA wal_autocheckpoint={SAFETY_NET_PAGES}")

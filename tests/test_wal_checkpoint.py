"""The server's background WAL checkpointer: it copies committed frames into the
database while the writer (an ingest request) only checkpoints past the safety net."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from django.db import connection, connections

from webapp.traces.checkpoint import SAFETY_NET_PAGES, Checkpointer, start_checkpointer

ROWS = 2000


def wait_for(checkpointer: Checkpointer, frames: int) -> tuple[int, int, int] | None:
    for _ in range(200):  # at most ~10 s on a loaded machine
        last = checkpointer.last
        if last is not None and last[1] >= frames and last[2] == last[1]:
            return last
        time.sleep(0.05)
    return checkpointer.last


def test_it_checkpoints_what_a_writer_committed(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    writer = sqlite3.connect(path, isolation_level=None)
    writer.executescript(f"PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint={SAFETY_NET_PAGES};")
    writer.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, payload TEXT)")
    checkpointer = start_checkpointer(0.05, str(path))
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.executemany("INSERT INTO t (payload) VALUES (?)", [("x" * 500,) for _ in range(ROWS)])
        writer.execute("COMMIT")
        frames = writer.execute("PRAGMA wal_checkpoint(NOOP)").fetchone()[1]  # what the commit appended
        assert frames > 100  # a megabyte: the writer itself did not checkpoint it
        last = wait_for(checkpointer, frames)
        assert last is not None and last[0] == 0 and last[1] >= frames and last[2] == last[1]
        reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        assert reader.execute("SELECT count(*) FROM t").fetchone() == (ROWS,)
        reader.close()
    finally:
        checkpointer.stop()
        writer.close()


def autocheckpoint_of_a_new_connection() -> int:
    fresh = connections.create_connection("default")  # connection_created fires on connect
    try:
        fresh.ensure_connection()
        with fresh.cursor() as cursor:
            cursor.execute("PRAGMA wal_autocheckpoint")
            return int(cursor.fetchone()[0])
    finally:
        fresh.close()


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "sqlite", reason="the safety net is a SQLite pragma")
def test_new_connections_checkpoint_only_past_the_safety_net(tmp_path: Path) -> None:
    checkpointer = start_checkpointer(60.0, str(tmp_path / "unused.sqlite3"))
    try:
        assert autocheckpoint_of_a_new_connection() == SAFETY_NET_PAGES
    finally:
        checkpointer.stop()
    assert autocheckpoint_of_a_new_connection() == 1000  # SQLite's default once stopped

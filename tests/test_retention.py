"""Retention trim: oldest rows go first, by age and by rows per table, in small batches."""

from __future__ import annotations

import time
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import OperationalError
from django.db.models import Model
from django.test import override_settings

from translators import records as r
from webapp.traces.models import Connection, SkbDrop, TcpStateChange, Trimmed
from webapp.traces.retention import Policy, start_trimmer, trim
from webapp.traces.store import store_batch

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
DAY = 86400.0
NOW = 100 * DAY


def drop(seq: int, wall: float) -> r.SkbDrop:
    return r.SkbDrop(host_id="h", boot_id="b", seq=seq, ts_ns=seq, ts_wall=wall, provider="skb", probe="m-free",
                     drop_reason=2, drop_reason_str="NO_SOCKET")  # fmt: skip


def state(seq: int, wall: float, conn: str) -> r.TcpStateChange:
    return r.TcpStateChange(host_id="h", boot_id="b", seq=seq, ts_ns=seq, ts_wall=wall, provider="tcp",
                            probe="state-change", prev_state="CLOSED", state="SYN_SENT", conn_uuid=conn)  # fmt: skip


def test_it_deletes_rows_older_than_the_retention_days_in_batches() -> None:
    # 25 drops 10 days old, 5 from today; batches of 7 need four delete rounds.
    store_batch([drop(i, NOW - 10 * DAY) for i in range(25)] + [drop(100 + i, NOW) for i in range(5)])
    deleted = trim(Policy(days=3, rows=0, batch=7), now=NOW)
    assert deleted == {SkbDrop._meta.db_table: 25}
    assert sorted(SkbDrop.objects.values_list("seq", flat=True)) == [100, 101, 102, 103, 104]


def test_it_keeps_at_most_the_retention_rows_per_table_newest_first() -> None:
    store_batch([drop(i, NOW) for i in range(12)] + [state(50 + i, NOW, f"c{i}") for i in range(3)])
    deleted = trim(Policy(days=0, rows=4, batch=5), now=NOW)
    assert deleted == {SkbDrop._meta.db_table: 8}
    assert sorted(SkbDrop.objects.values_list("seq", flat=True)) == [8, 9, 10, 11]
    assert TcpStateChange.objects.count() == 3  # under the limit: untouched
    assert Connection.objects.count() == 3


def test_it_trims_connections_by_last_activity() -> None:
    store_batch([state(1, NOW - 40 * DAY, "old"), state(2, NOW, "new")])
    trim(Policy(days=30, rows=0, batch=100), now=NOW)
    assert list(Connection.objects.values_list("conn_uuid", flat=True)) == ["new"]
    assert list(TcpStateChange.objects.values_list("seq", flat=True)) == [2]


def test_it_keeps_everything_when_both_limits_are_off() -> None:
    store_batch([drop(i, 1.0) for i in range(5)])
    assert trim(Policy(days=0, rows=0, batch=2), now=NOW) == {}
    assert SkbDrop.objects.count() == 5


@override_settings(NETTRAIL_RETENTION_DAYS=0, NETTRAIL_RETENTION_ROWS=2, NETTRAIL_TRIM_BATCH=1)
def test_the_trim_command_applies_the_settings() -> None:
    store_batch([drop(i, NOW) for i in range(5)])
    out = StringIO()
    call_command("trim", stdout=out)
    assert out.getvalue().splitlines() == [f"{SkbDrop._meta.db_table}: 3 deleted", "trim: 3 rows deleted"]
    assert sorted(SkbDrop.objects.values_list("seq", flat=True)) == [3, 4]


def count_between_trims(model: type[Model]) -> int:
    """The row count, asked again while the trimmer thread holds the table: the SQLite test
    database is in shared-cache memory, whose table lock fails a reader at once ("database
    table is locked") where a file database in WAL mode, as served, lets it read."""
    for _ in range(100):  # bounded: the trimmer's transaction takes milliseconds
        try:
            return int(model.objects.count())
        except OperationalError as e:
            if "locked" not in str(e):
                raise
            time.sleep(0.01)
    return int(model.objects.count())


@pytest.mark.django_db(transaction=True)  # the trimmer thread has its own connection: rows must be committed
def test_the_server_trimmer_thread_trims_periodically_until_stopped() -> None:
    store_batch([drop(i, 1.0) for i in range(6)])  # far older than 1 day
    stop = start_trimmer(0.05, Policy(days=1, rows=0, batch=4))
    try:
        for _ in range(200):  # bounded wait: the thread runs every 50 ms
            if count_between_trims(SkbDrop) == 0:
                break
            time.sleep(0.05)
        assert count_between_trims(SkbDrop) == 0
    finally:
        stop.set()


def test_what_it_removes_is_kept_per_table_with_the_newest_time_removed() -> None:
    """Retention is the store dropping records: each table's count and the newest time
    removed are kept (Trimmed), and added to on every trim, for the pages' notes."""
    store_batch([drop(i, NOW - 10 * DAY + i) for i in range(6)] + [drop(100 + i, NOW + i) for i in range(6)])
    trim(Policy(days=3, rows=0, batch=4), now=NOW)  # the six old ones, by age
    row = Trimmed.objects.get(table=SkbDrop._meta.db_table)
    assert (row.rows, row.newest, row.updated) == (6, NOW - 3 * DAY, NOW)  # everything before the cutoff
    trim(Policy(days=0, rows=2, batch=3), now=NOW + 10)  # then by rows: 100..103 go
    row.refresh_from_db()
    assert (row.rows, row.newest, row.updated) == (10, NOW + 3, NOW + 10)  # the newest removed: seq 103's time
    assert not Trimmed.objects.filter(table=TcpStateChange._meta.db_table).exists()  # nothing removed there

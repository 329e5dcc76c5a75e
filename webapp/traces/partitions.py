"""PostgreSQL: record tables partitioned by day of ``ts_wall`` (native declarative partitioning).

Each record table is ``PARTITION BY RANGE (ts_wall)`` with one partition per UTC day,
named ``<table>_pYYYYMMDD``. The application creates them: ``ensure_ahead`` at
start-up and once an hour (today and the next ``AHEAD_DAYS`` days), and the COPY
path (pgcopy.py) for the day of any record that arrives outside them (replays, a
collector's wrong clock). Retention drops whole partitions older than the cutoff
(``drop_before``), which costs no row deletes, no vacuum and no index bloat.

PostgreSQL requires the partition key in every unique index, so the idempotence
key is (host_id, boot_id, seq, ts_wall) and the primary key (id, ts_wall). A
redelivered record carries the same ts_wall, so it is still a duplicate, never a
double; only a collector that reused a (host, boot, seq) for a different time could
store both, which the collector never does (seq is per boot and only grows).
Alerts are the exception: few rows, and the dashboard's acknowledgements hold a
foreign key to ``traces_alert.id``, which a partitioned table (primary key (id,
ts_wall)) cannot serve; that table stays plain and is trimmed by row deletes.
SQLite keeps its plain tables: nothing here runs there.
Keep in sync with: migrations/0011_partition_records_postgres.py, pgcopy.py, retention.py.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import time
from collections.abc import Iterable
from typing import Any

from django.db import connection, transaction

from webapp.traces import drop_summary
from webapp.traces.models import KIND_MODELS

DAY = 86400
AHEAD_DAYS = 2  # partitions created ahead of today: a writer never waits on DDL at midnight
UNPARTITIONED_KINDS = frozenset({"alert"})  # see the module's docstring
_NAME = re.compile(r"^(?P<table>.+)_p(?P<day>\d{8})$")
# (table, day number) already known to exist in this process: the common batch
# touches only those and costs no catalog query.
_known: set[tuple[str, int]] = set()


def enabled() -> bool:
    return bool(connection.vendor == "postgresql")


DROP_TABLE = KIND_MODELS["skb_drop"]._meta.db_table


def record_tables() -> list[str]:
    """The partitioned tables."""
    return [model._meta.db_table for kind, model in KIND_MODELS.items() if kind not in UNPARTITIONED_KINDS]


def is_partitioned(kind: str) -> bool:
    return kind not in UNPARTITIONED_KINDS


def day_of(ts_wall: float) -> int:
    """Days since the epoch (UTC) of a wall-clock timestamp; NaN/inf never reach here (schema)."""
    return math.floor(ts_wall / DAY)


def partition_name(table: str, day: int) -> str:
    return f"{table}_p{dt.datetime.fromtimestamp(day * DAY, dt.UTC):%Y%m%d}"


def ensure(table: str, days: Iterable[int]) -> int:
    """Create the missing day partitions of one table; returns how many were created.

    Creation takes a lock on the parent until the transaction ends, so it happens
    only for days not created ahead (the rare path). An advisory lock per table
    serialises concurrent writers, so two of them never race on the same name.
    """
    missing = [day for day in set(days) if (table, day) not in _known]
    if not missing:
        return 0
    created = 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"nettrail-partition:{table}"])
        existing = _existing_days(cursor, table)
        for day in sorted(missing):
            if day not in existing:
                cursor.execute(
                    f'CREATE TABLE "{partition_name(table, day)}" PARTITION OF "{table}" '
                    f"FOR VALUES FROM ({day * DAY}) TO ({(day + 1) * DAY})"
                )
                created += 1
        # Only a committed partition is sure to stay: one this transaction created, or
        # even only saw (created earlier in the same transaction), goes if it rolls back.
        seen = [(table, day) for day in existing | set(missing)]
        transaction.on_commit(lambda: _known.update(seen))
    return created


def ensure_ahead(now: float | None = None, ahead: int = AHEAD_DAYS) -> int:
    """Today's and the next `ahead` days' partitions of every record table."""
    if not enabled():
        return 0
    today = day_of(time.time() if now is None else now)
    return sum(ensure(table, range(today, today + ahead + 1)) for table in record_tables())


def drop_before(cutoff: float) -> dict[str, int]:
    """Drop every partition whose whole day is older than `cutoff`; rows dropped per table.

    The rows are counted first (one scan of a partition about to go), so retention
    reports the same numbers as on SQLite; the rows of the day the cutoff falls in
    are left to retention's row deletes.
    """
    if not enabled():
        return {}
    last_whole = day_of(cutoff) - 1  # day d ends at (d + 1) * DAY: at or before the cutoff
    dropped: dict[str, int] = {}
    with connection.cursor() as cursor:
        for table in record_tables():
            for day in sorted(day for day in _existing_days(cursor, table) if day <= last_whole):
                name = partition_name(table, day)
                cursor.execute(f'SELECT count(*) FROM "{name}"')
                rows = int(cursor.fetchone()[0])
                if rows and table == DROP_TABLE:  # the buffers page's counts (drop_summary.py)
                    drop_summary.forget_table(name)
                cursor.execute(f'DROP TABLE "{name}"')
                _known.discard((table, day))
                if rows:
                    dropped[table] = dropped.get(table, 0) + rows
    return dropped


def partitions(table: str) -> list[str]:
    """The table's partition names, oldest first (for tests, the Status page and docs)."""
    with connection.cursor() as cursor:
        return [partition_name(table, day) for day in sorted(_existing_days(cursor, table))]


def forget() -> None:
    """Drop the in-process cache (after a test database is rebuilt, or partitions dropped elsewhere)."""
    _known.clear()


def _existing_days(cursor: object, table: str) -> set[int]:
    cursor.execute(  # type: ignore[attr-defined]
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = %s",
        [table],
    )
    days = set()
    for (name,) in cursor.fetchall():  # type: ignore[attr-defined]
        match = _NAME.match(name)
        if match and match["table"] == table:
            stamp = dt.datetime.strptime(match["day"], "%Y%m%d").replace(tzinfo=dt.UTC)
            days.add(int(stamp.timestamp()) // DAY)
    return days


def convert(schema_editor: Any, model: Any) -> bool:
    """Turn one record table into a partitioned one, rows kept (migration 0008); False if it is already.

    Rename, create the partitioned twin with the same columns, defaults and identity,
    move the rows into their day partitions, drop the old table, then add the keys
    (with ts_wall, see the module's docstring) and the model's indexes under their
    Django names, so later migrations find them.
    """
    table = model._meta.db_table
    cursor = schema_editor.connection.cursor()
    cursor.execute("SELECT relkind FROM pg_class WHERE relname = %s AND relkind IN ('r', 'p')", [table])
    if cursor.fetchone() == ("p",):
        return False
    old = f"{table}__unpartitioned"
    cursor.execute(f'ALTER TABLE "{table}" RENAME TO "{old}"')
    cursor.execute(
        f'CREATE TABLE "{table}" (LIKE "{old}" INCLUDING DEFAULTS INCLUDING IDENTITY) PARTITION BY RANGE (ts_wall)'
    )
    cursor.execute(f'SELECT DISTINCT floor(ts_wall / {DAY})::bigint FROM "{old}"')
    for (day,) in cursor.fetchall():
        cursor.execute(
            f'CREATE TABLE "{partition_name(table, day)}" PARTITION OF "{table}" '
            f"FOR VALUES FROM ({day * DAY}) TO ({(day + 1) * DAY})"
        )
    cursor.execute(f'INSERT INTO "{table}" OVERRIDING SYSTEM VALUE SELECT * FROM "{old}"')
    cursor.execute(f"SELECT setval(pg_get_serial_sequence(%s, 'id'), max(id)) FROM \"{table}\"", [table])
    cursor.execute(f'DROP TABLE "{old}"')
    cursor.execute(f'ALTER TABLE "{table}" ADD PRIMARY KEY (id, ts_wall)')
    for constraint in model._meta.constraints:
        # The idempotence key, widened by the partition key (the only unique constraint).
        columns = ", ".join(f'"{name}"' for name in (*constraint.fields, "ts_wall"))
        cursor.execute(f'ALTER TABLE "{table}" ADD CONSTRAINT "{constraint.name}" UNIQUE ({columns})')
    for index in model._meta.indexes:
        schema_editor.add_index(model, index)
    return True

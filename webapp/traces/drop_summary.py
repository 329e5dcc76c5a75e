"""The buffers page's drop counts, kept up to date as skb_drop rows come and go.

The page's breakdowns (drops by reason and kernel location, by process, the stacked
timeline, the reasons offered) used to be GROUP BYs over every stored skb_drop row of
the host or of all hosts: 0.6-2.5 s at a million drops (docs/benchmarks.md, "Dashboard
pages at volume"). Here three small tables (models.DropByLocation, DropByProcess,
DropBySecond) hold those counts per key:

* ``tally`` is a store hook (store.STORE_HOOKS): it counts a batch's new skb_drop
  records in Python and returns the upserts (``n = n + excluded.n``), which run in the
  ingest transaction, so a batch rolled back counts nothing and a resent one once;
* retention takes rows away: ``forget_rows`` before a batch of rows is deleted,
  ``forget_table`` before a PostgreSQL day partition is dropped;
* ``rebuild`` recounts everything from the stored rows (migration 0033 fills the tables
  of an existing database with it; the tests compare it with what the hook kept).

Each count equals a COUNT(*) over the stored rows of its key (tests/test_drop_summary.py
checks the page's answers against the old queries on both databases). Rows are
upserted in key order, so two writers adding to the same keys cannot deadlock.
Keep in sync with: models.py (the three tables), view.py (COUNTED: the fields read),
retention.py, partitions.py, webapp/dashboard/drop_summaries.py (the reader).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from django.db import connection

if TYPE_CHECKING:
    from webapp.traces.store import HookWrite

UNIX_LOCATION_PREFIX = "unix_"  # = dashboard/buffers.py's: af_unix's own functions
NULL_REASON, NULL_LOCATION, NULL_COMM, NULL_TGID = 1, 2, 4, 8

LocKey = tuple[str, str, str, int]  # host, reason, location, nulls
ProcKey = tuple[str, str, str, int, bool, int]  # host, reason, comm, tgid, unix, nulls
SecKey = tuple[str, str, int, bool, int]  # host, reason, second, unix, nulls
# (host_id, drop_reason_str, drop_location, comm, tgid, ts_wall) of one skb_drop row
Fields = tuple[str, Any, Any, Any, Any, float]

TABLES = {
    "loc": ("traces_dropbylocation", ("host_id", "drop_reason_str", "drop_location", "nulls")),
    "proc": ("traces_dropbyprocess", ("host_id", "drop_reason_str", "comm", "tgid", "unix", "nulls")),
    "sec": ("traces_dropbysecond", ("host_id", "drop_reason_str", "second", "unix", "nulls")),
}
FIELDS = ("host_id", "drop_reason_str", "drop_location", "comm", "tgid", "ts_wall")


def is_unix(location: str | None) -> bool:
    return location is not None and location.startswith(UNIX_LOCATION_PREFIX)


class Counts:
    """The three tables' deltas for some skb_drop rows."""

    def __init__(self) -> None:
        self.loc: Counter[LocKey] = Counter()
        self.proc: Counter[ProcKey] = Counter()
        self.sec: Counter[SecKey] = Counter()

    def add(self, rows: Iterable[Fields], sign: int = 1) -> Counts:
        for host, reason, location, comm, tgid, ts in rows:
            bits = (NULL_REASON if reason is None else 0) | (NULL_LOCATION if location is None else 0)
            reason_bits = bits & NULL_REASON
            reason = reason or ""
            unix = is_unix(location)
            self.loc[(host, reason, location or "", bits)] += sign
            pbits = reason_bits | (NULL_COMM if comm is None else 0) | (NULL_TGID if tgid is None else 0)
            self.proc[(host, reason, comm or "", tgid or 0, unix, pbits)] += sign
            self.sec[(host, reason, math.floor(ts), unix, reason_bits)] += sign
        return self

    def write(self) -> None:
        for name, counts in (("loc", self.loc), ("proc", self.proc), ("sec", self.sec)):
            _upsert(name, counts)


def _upsert(name: str, counts: Counter[Any]) -> None:
    rows = [(*key, n) for key, n in sorted(counts.items()) if n]
    if not rows:
        return
    table, key = TABLES[name]
    cols = ", ".join((*key, "n"))
    marks = ", ".join(["%s"] * (len(key) + 1))
    sql = (
        f"INSERT INTO {table} ({cols}) VALUES ({marks}) "
        f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET n = {table}.n + excluded.n"
    )
    with connection.cursor() as cursor:
        cursor.executemany(sql, rows)
        if any(n < 0 for *_k, n in rows):
            cursor.execute(f"DELETE FROM {table} WHERE n <= 0")


def tally(records: Sequence[Any]) -> HookWrite | None:
    """Store hook: the new skb_drop records' counts, written in the ingest transaction."""
    drops = [r for r in records if r.kind == "skb_drop"]
    if not drops:
        return None
    counts = Counts().add((r.host_id, r.drop_reason_str, r.drop_location, r.comm, r.tgid, r.ts_wall) for r in drops)
    return counts.write


def forget_rows(rows: Iterable[Fields]) -> None:
    """Retention: these stored rows (FIELDS, in order) are about to be deleted."""
    Counts().add(rows, -1).write()


def forget_table(table: str) -> None:
    """Retention on PostgreSQL: every row of this skb_drop partition is about to go."""
    _grouped(table, -1).write()


def rebuild() -> None:
    """Recount the three tables from the stored skb_drop rows (grouped in the database)."""
    from webapp.traces.models import KIND_MODELS

    with connection.cursor() as cursor:
        for table, _key in TABLES.values():
            cursor.execute(f"DELETE FROM {table}")
    _grouped(KIND_MODELS["skb_drop"]._meta.db_table, 1).write()


def _grouped(table: str, sign: int) -> Counts:
    """The counts of every row of a table of skb_drop rows, grouped by the database."""
    # the whole second, as math.floor has it (ts_wall >= 0: a cast truncates the same way)
    second = "floor(ts_wall)::bigint" if connection.vendor == "postgresql" else "CAST(ts_wall AS INTEGER)"
    cols = ", ".join(FIELDS[:-1])
    counts = Counts()
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT {cols}, {second} AS s, count(*) FROM "{table}" GROUP BY {cols}, s')
        for *fields, n in cursor.fetchall():
            counts.add([tuple(fields)], sign * int(n))
    return counts

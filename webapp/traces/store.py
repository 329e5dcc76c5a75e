"""Stores a decoded batch of records: all or nothing, each (host, boot, seq) once.

Per kind, rows go in with one ``executemany`` of ``INSERT ... ON CONFLICT DO
NOTHING`` (SQLite >= 3.24 and PostgreSQL), in the model's column order. That is
Django's ``bulk_create(ignore_conflicts=True)`` without building a model instance
per record, which is where most of the time went. The insert runs under a
savepoint: when its rowcount shows every row was new (the common case) that is
all; otherwise it is rolled back, the records already stored are found by one range
query per (kind, host, boot) on the unique index, and only the new ones are
inserted, so the duplicate count and the Connection updates stay exact.
On PostgreSQL the rows go with COPY into day partitions instead: pgcopy.py.
Keep in sync with: webapp/traces/schema.py (columns, JSON rule), models.py.
"""

from __future__ import annotations

import functools
import logging
import math
import operator
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import msgspec
from django.db import DataError, IntegrityError, connection, transaction

from translators.records import Record, describe
from webapp.traces import lifecycle
from webapp.traces.models import KIND_MODELS, RecordModel
from webapp.traces.schema import KIND_BY_TYPE, is_json

if TYPE_CHECKING:
    from webapp.traces.pgcopy import Encoded

log = logging.getLogger(__name__)
INT64 = (-(2**63), 2**63 - 1)
_json = msgspec.json.Encoder()

# Python's sqlite3 binds None and bool through its slow adaptation path (a registry
# miss, then __adapt__/__conform__ lookups: ~250 ns a value), and a record has ~20 NULL
# columns: a third of the insert. Registered, they are registry hits adapted by C
# callables: None unchanged ({}.get(None) is None, bound as NULL), bools to the 0/1
# they were stored as anyway. Process-wide, and the same values for any sqlite3 user.
_none: dict[None, None] = {}
sqlite3.register_adapter(type(None), cast(Callable[[None], None], _none.get))
sqlite3.register_adapter(bool, int)


@dataclass
class StoreResult:
    stored: int = 0
    duplicates: int = 0
    new: list[Record] = field(default_factory=list)


class UnstorableRecord(ValueError):
    """A record the schema accepts but the database cannot hold (e.g. an int over 64 bits)."""

    def __init__(self, index: int, field_name: str, why: str) -> None:
        super().__init__(f"record {index}: {field_name}: {why}")
        self.index = index
        self.field = field_name
        self.why = why


@dataclass(frozen=True)
class _Table:
    sql: str
    row: Callable[[Record], tuple[Any, ...]]
    existing_sql: str
    insert_sql: Callable[[tuple[int, ...]], str]  # the INSERT of only these columns

    def pruned(self, rows: list[tuple[Any, ...]]) -> tuple[str, list[tuple[Any, ...]]]:
        """The INSERT and rows without the columns that are NULL in every row.

        An omitted column is NULL all the same, and each bound NULL costs the sqlite3
        module ~100 ns even through its adapter, while a kind's records usually leave
        the same ~20 fields empty. The columns empty in the first row are dropped when
        every row has them empty (one C-level comparison per row); otherwise nothing is.
        """
        empty = tuple(i for i, value in enumerate(rows[0]) if value is None)
        if not empty:
            return self.sql, rows
        blanks = (None,) * len(empty)
        if len(empty) == 1:
            index = empty[0]
            if any(row[index] is not None for row in rows):
                return self.sql, rows
        elif not all(map(blanks.__eq__, map(operator.itemgetter(*empty), rows))):
            return self.sql, rows
        keep = tuple(i for i in range(len(rows[0])) if i not in empty)
        return self.insert_sql(keep), list(map(operator.itemgetter(*keep), rows))


_tables: dict[tuple[str, str], _Table] = {}
# A hook's write: run inside the ingest transaction, after the Connection updates.
HookWrite = Callable[[], None]
# Called with the records of a batch that are being stored (duplicates excluded):
# e.g. webapp/metrics counts them. A hook does its Python work and returns what it
# writes (or None); it must not use the database itself, since the scale-out writer
# calls it while its connection is busy with the batch's COPY (store_new_batch). The
# write runs inside the ingest transaction, after the Connection updates. A hook or a
# write that raises rolls the batch back, so neither may fail on valid records.
STORE_HOOKS: list[Callable[[Sequence[Record]], HookWrite | None]] = []


def store_batch(records: Sequence[Record], encoded: Encoded | None = None) -> StoreResult:
    """Insert every new record and update connections, in one transaction.

    encoded: pgcopy.encode() of the same records, made by the ingest tier (PostgreSQL
    only): the rows of an all-new batch are COPYed from it as they are.
    """
    try:
        with transaction.atomic():
            result = _store(records, encoded)
            result.new = _batch_order(records, result.new)
            lifecycle.apply(result.new)
            _run_hooks(result.new)
    except (DataError, IntegrityError, OverflowError) as exc:
        bad = find_unstorable(records, connection.vendor)
        if bad is None:
            raise
        raise bad from exc
    return result


def _run_hooks(records: Sequence[Record]) -> None:
    _run_writes([hook(records) for hook in STORE_HOOKS])


def _run_writes(writes: Sequence[HookWrite | None]) -> None:
    for write in writes:
        if write is not None:
            write()


@dataclass
class _Overlapped:
    """What store_new_batch does while PostgreSQL stores the batch's COPYs, in two steps:
    `read` during the largest COPY, `fold_and_tally` during the second (pgcopy.copy_new)."""

    body: bytes
    side: Any  # pgbulk.side_connection(), or None: the rows are read after the COPYs
    new: list[Any] = field(default_factory=list)
    fold: lifecycle.Fold | None = None
    writes: list[HookWrite | None] = field(default_factory=list)

    def read(self) -> None:
        """Decode the views (in batch order, as store_batch gives them), read their connections' rows."""
        import psycopg

        from webapp.traces import pgbulk, view

        self.new = view.decode(self.body)
        self.fold = lifecycle.prepare(self.new, load=False)
        if self.side is not None:
            try:
                self.fold.load(self.side)
            except psycopg.Error as exc:  # read after the COPYs instead, on the writer's own connection
                log.warning("the side connection failed (%s); reading the Connection rows after the COPY", exc)
                pgbulk.close_side()

    def fold_and_tally(self) -> None:
        assert self.fold is not None
        if self.fold.loaded:
            self.fold.fold()
        self.writes = [hook(self.new) for hook in STORE_HOOKS]


def store_new_batch(body: bytes, encoded: Encoded) -> StoreResult | None:
    """PostgreSQL, the scale-out writer: store an all-new batch from its COPY-ready rows,
    folding and counting its records from their views (view.py, decoded from `body`,
    the entry's MessagePack records); in one transaction.

    The writer's own work overlaps the server's: while PostgreSQL stores the batch's
    largest COPY, the views are decoded and the batch's Connection rows read on a
    second session (pgbulk.side_connection: this one is busy with the COPY), those
    this thread committed last taken as it remembers them (lifecycle.REMEMBERED_ROWS);
    during the second largest COPY, the rows are folded and the hooks tally; after the
    COPYs come only the writes. The rows are read without a lock, outside this
    transaction: each is written back only if it is still the version read, else read
    again, locked, and folded again (lifecycle.Fold.finish), so a concurrent update is
    never lost. Inside a transaction of the caller's, whose writes another session
    cannot see, the rows are read after the COPYs, on this session.

    None, with nothing written, when the batch cannot be stored this way: a record of
    it is already stored (a resend, a redelivery) or the database refuses a value. The
    caller then stores the whole records with store_batch, which counts the duplicates
    exactly and names the refused value.
    """
    from webapp.traces import pgbulk, pgcopy

    work = _Overlapped(body, pgbulk.side_connection())
    try:
        with transaction.atomic():
            if not pgcopy.copy_new(encoded, meanwhile=[work.read, work.fold_and_tally]):
                return None
            fold = work.fold
            assert fold is not None, "copy_new runs every step of `meanwhile` for a batch it stores"
            if not fold.loaded:
                fold.load()
                fold.fold()
            fold.finish()
            _run_writes(work.writes)
    except (DataError, OverflowError):
        return None
    return StoreResult(stored=len(work.new), new=work.new)


def _batch_order(records: Sequence[Record], new: list[Record]) -> list[Record]:
    """The new records in the order of the batch (_store goes kind by kind): the fold's
    outcome can depend on the order (attribution, the 4-tuple filled in), and the batch's
    is the order the collector saw them in."""
    if len(new) == len(records):
        return list(records)
    kept = set(map(id, new))
    out = []
    for rec in records:
        if id(rec) in kept:  # once: a batch may hold one record object twice
            kept.discard(id(rec))
            out.append(rec)
    return out


def _store(records: Sequence[Record], encoded: Encoded | None = None) -> StoreResult:
    if connection.vendor == "postgresql":
        # COPY into day partitions (pgcopy.py); the executemany path below is SQLite's.
        from webapp.traces import pgcopy

        return pgcopy.store(records, encoded)
    result = StoreResult()
    for kind, group in _group(records).items():
        table = _table(kind)
        rows = [table.row(rec) for rec in group]
        inserted = _insert_all(table, rows)
        if inserted is not None:
            result.stored += inserted
            result.new.extend(group)
            continue
        fresh = _fresh(table, group)
        result.duplicates += len(group) - len(fresh)
        if fresh:
            with connection.cursor() as cursor:
                cursor.executemany(table.sql, [rows[i] for i in fresh])
                inserted = cursor.rowcount
            # A concurrent ingest of the same records (PostgreSQL, READ COMMITTED) can
            # win the race after the duplicate check: ON CONFLICT skipped those rows.
            result.duplicates += len(fresh) - inserted
            result.stored += inserted
            result.new.extend(group[i] for i in fresh)
    return result


def _insert_all(table: _Table, rows: list[tuple[Any, ...]]) -> int | None:
    """Insert every row, or nothing and None when one of them was already stored.

    The common batch is all new: one executemany under a savepoint, and its rowcount
    proves it, so no duplicate query is needed. A resent batch rolls back to the
    savepoint and takes the exact path (_fresh), which knows which records are new.
    """
    sql, values = table.pruned(rows)
    savepoint = transaction.savepoint()
    with connection.cursor() as cursor:
        cursor.executemany(sql, values)
        inserted = int(cursor.rowcount)
    if inserted == len(rows):
        transaction.savepoint_commit(savepoint)
        return inserted
    transaction.savepoint_rollback(savepoint)
    return None


def _group(records: Sequence[Record]) -> dict[str, list[Record]]:
    groups: dict[str, list[Record]] = {}
    for rec in records:
        groups.setdefault(KIND_BY_TYPE[type(rec)], []).append(rec)
    return groups


def _fresh(table: _Table, group: list[Record]) -> list[int]:
    """Indexes of the records of one kind not already stored (nor repeated earlier in the batch)."""
    by_boot: dict[tuple[str, str], list[int]] = {}
    for rec in group:
        by_boot.setdefault((rec.host_id, rec.boot_id), []).append(rec.seq)
    seen: set[tuple[str, str, int]] = set()
    with connection.cursor() as cursor:
        for (host, boot), seqs in by_boot.items():
            cursor.execute(table.existing_sql, [host, boot, min(seqs), max(seqs)])
            seen.update((host, boot, seq) for (seq,) in cursor.fetchall())
    fresh = []
    for index, rec in enumerate(group):
        key = (rec.host_id, rec.boot_id, rec.seq)
        if key not in seen:
            seen.add(key)
            fresh.append(index)
    return fresh


def _table(kind: str) -> _Table:
    cache_key = (connection.vendor, kind)
    if cache_key not in _tables:
        _tables[cache_key] = _build_table(KIND_MODELS[kind])
    return _tables[cache_key]


def _build_table(model: type[RecordModel]) -> _Table:
    # Columns in the struct's own field order, so msgspec.structs.astuple (one C call)
    # yields each row: a third of the cost of fetching ~50 attributes one by one.
    names = list(model.record_type.__struct_fields__)
    json_names = {d.name for d in describe(model.record_type) if is_json(d)}
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)

    @functools.cache
    def insert_sql(keep: tuple[int, ...]) -> str:
        placeholders = ", ".join("%s" for _ in keep)
        return (
            f"INSERT INTO {table} ({', '.join(quote(names[i]) for i in keep)}) VALUES ({placeholders}) "
            f"ON CONFLICT ({quote('host_id')}, {quote('boot_id')}, {quote('seq')}) DO NOTHING"
        )

    existing_sql = f"SELECT {quote('seq')} FROM {table} WHERE host_id = %s AND boot_id = %s AND seq BETWEEN %s AND %s"
    json_columns = [i for i, name in enumerate(names) if name in json_names]
    sql = insert_sql(tuple(range(len(names))))
    return _Table(sql=sql, row=_row_builder(json_columns), existing_sql=existing_sql, insert_sql=insert_sql)


def _row_builder(json_columns: list[int]) -> Callable[[Record], tuple[Any, ...]]:
    astuple = msgspec.structs.astuple

    def row(rec: Record) -> tuple[Any, ...]:
        values = list(astuple(rec))
        for i in json_columns:
            value = values[i]
            if value is not None:
                # Most lists are the empty default (`approx`): skip the encoder for them.
                values[i] = "[]" if value == [] else _json.encode(value).decode()
        return tuple(values)

    return row


def find_unstorable(records: Sequence[Record], vendor: str) -> UnstorableRecord | None:
    """The first value the database refuses, found after a failed insert (the slow path)."""
    for index, rec in enumerate(records):
        for desc in describe(type(rec)):
            why = _refusal(getattr(rec, desc.name), vendor)
            if why is not None:
                return UnstorableRecord(index, desc.name, why)
    return None


def _refusal(value: Any, vendor: str) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool) and not INT64[0] <= value <= INT64[1]:
        return f"{value} does not fit a signed 64-bit column"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    if isinstance(value, str) and "\x00" in value and vendor == "postgresql":
        return "PostgreSQL text cannot hold NUL characters"
    return None

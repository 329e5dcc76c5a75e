"""PostgreSQL: a batch of records written with COPY (psycopg 3's copy protocol) into day partitions.

Per kind, the day partitions the rows need are made sure of (partitions.py), then:

* the common batch, all new: one ``COPY table (columns) FROM STDIN`` per kind straight
  into the partitioned tables, all under one savepoint. It is the raw COPY peer of
  bench/bench_pg_ingest.py plus the row building, nothing more.
* a batch with a record already stored (a collector's resend, a Redis redelivery
  after a writer died between commit and XACK): the unique index refuses the
  direct COPY, the savepoint is rolled back, and the rows are copied into a
  temporary staging table and moved with ``INSERT ... SELECT ... ON CONFLICT DO
  NOTHING RETURNING`` the keys that went in. So a redelivered batch is a duplicate,
  never a double, and the duplicate count and the Connection updates stay exact.

COPY-ready batches (``encode``): the scale-out ingest tier, which validates a batch
before it queues it on the Redis stream, also formats its rows as COPY text, per
kind, with the days they fall in (psycopg's own C row formatter, with the adapters
of its database connection). A writer given them (``store(records, encoded)``)
sends those bytes as they are (``copy.write``): no row tuples, no formatting in the
writer. The duplicate path builds its rows from the records as before.

Staging writes every row twice (temporary table, then the table) and plans an
INSERT ... SELECT; the direct COPY avoids both for the common batch.
bench/bench_pg_ingest.py measures both paths (docs/benchmarks.md); with COPY-ready
rows the direct path is the cheaper by far (the staged one builds the rows too).
Called by store.py's ``_store`` on PostgreSQL, inside the batch's transaction.
Keep in sync with: store.py (StoreResult, the row builder), partitions.py, webapp/bus/streams.py (the
entry's `copy` field), bench/bench_pg_ingest.py.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from django.db import IntegrityError, connection, transaction
from psycopg._copy_base import format_row_text
from psycopg.adapt import Transformer

from translators.records import Record
from webapp.traces import partitions
from webapp.traces.models import KIND_MODELS
from webapp.traces.store import StoreResult, _group, _table


@dataclass(frozen=True)
class _Plan:
    table: str
    partitioned: bool
    copy_sql: str  # COPY straight into the partitioned table
    stage: str  # the staging table's name (temporary, one per kind and session)
    stage_sql: str  # creates it when this session has not yet
    stage_copy_sql: str
    merge_sql: str  # staging -> table, returning the keys stored


# One kind's COPY-ready rows: (kind, the days of its rows (partitions.day_of), COPY text data).
Encoded = list[tuple[str, list[int], bytes]]
_plans: dict[str, _Plan] = {}
# False: every batch goes through the staging table (bench/bench_pg_ingest.py measures both).
DIRECT_FIRST = True


def encode(records: Sequence[Record]) -> Encoded:
    """The batch's rows as COPY text data per kind, in the columns and order store() copies."""
    # The connection's adapters, as the writer's write_row would use: bytea's text form
    # depends on the server (hex escapes), so not psycopg's connection-less defaults.
    connection.ensure_connection()
    transformer = Transformer(connection.connection)
    out: Encoded = []
    day_of = partitions.day_of
    for kind, group in _group(records).items():
        row = _table(kind).row
        data = bytearray()  # psycopg's (C) formatter of COPY text rows appends each row here
        for rec in group:
            format_row_text(row(rec), transformer, data)
        days = sorted({day_of(ts) for ts in map(_TS_WALL, group)}) if partitions.is_partitioned(kind) else []
        out.append((kind, days, bytes(data)))
    return out


def decode(data: bytes) -> Encoded:
    return _decode_encoded(data)


_decode_encoded = msgspec.msgpack.Decoder(list[tuple[str, list[int], bytes]]).decode
_TS_WALL = operator.attrgetter("ts_wall")


def store(records: Sequence[Record], encoded: Encoded | None = None) -> StoreResult:
    """Store a batch; `encoded` (encode() of the same records) skips the row building of the common batch."""
    result = StoreResult()
    groups = _group(records)
    direct = DIRECT_FIRST
    if encoded is not None and direct:
        direct = False  # if this COPY is refused, a record is already stored: staged path, no second try
        if copy_new(encoded):
            for group in groups.values():
                result.stored += len(group)
                result.new.extend(group)
            return result
    work: list[tuple[_Plan, list[Record], list[tuple[Any, ...]]]] = []
    for kind, group in groups.items():
        plan = _plan(kind)
        if plan.partitioned:
            partitions.ensure(plan.table, {partitions.day_of(rec.ts_wall) for rec in group})
        row = _table(kind).row
        work.append((plan, group, [row(rec) for rec in group]))
    # The common batch, all new: every kind COPYed under one savepoint (two round trips
    # for the batch, not two per kind).
    if direct and _copy_direct([(plan, rows) for plan, _, rows in work]):
        for _, group, _ in work:
            result.stored += len(group)
            result.new.extend(group)
        return result
    for plan, group, rows in work:
        try:
            stored = _copy_merge(plan, rows)
        except IntegrityError:
            # Not a duplicate then: e.g. a day partition another process's retention
            # dropped while this one still knew it. Ask the catalog again next time.
            partitions.forget()
            raise
        fresh = _first_of_each(group, stored)
        result.stored += len(fresh)
        result.duplicates += len(group) - len(fresh)
        result.new.extend(fresh)
    return result


def copy_new(encoded: Encoded, meanwhile: Sequence[Callable[[], None]] = ()) -> bool:
    """COPY a batch's COPY-ready rows as they are; False (nothing written) when one was already stored.

    meanwhile: steps run while the server stores the rows (the writer's own work): the
    kinds are COPYed largest first, the first step runs once the largest kind's rows are
    sent, before its COPY's end is awaited, the next once the second largest's are, and
    so on; steps left over run after the last COPY.
    """
    plans = [(_plan(kind), days, data) for kind, days, data in encoded]
    for plan, days, _ in plans:
        if plan.partitioned:
            partitions.ensure(plan.table, days)
    return _copy_direct([(plan, data) for plan, _, data in plans], meanwhile)


def _copy_direct(
    batches: Sequence[tuple[_Plan, list[tuple[Any, ...]] | bytes]], meanwhile: Sequence[Callable[[], None]] = ()
) -> bool:
    """COPY every row into its table; False (and nothing written) when one was already stored.

    meanwhile: see copy_new; every step runs, in order, unless a COPY fails."""
    if meanwhile:  # the largest first, so that the steps run in their order (one transaction: any order)
        batches = sorted(batches, key=lambda batch: len(batch[1]), reverse=True)
    try:
        with transaction.atomic(), connection.cursor() as cursor, connection.wrap_database_errors:
            for i, (plan, rows) in enumerate(batches):
                _copy(cursor.cursor, plan.copy_sql, rows, meanwhile[i] if i < len(meanwhile) else None)
    except IntegrityError:
        return False
    for step in meanwhile[len(batches) :]:
        step()
    return True


def _copy_merge(plan: _Plan, rows: list[tuple[Any, ...]]) -> set[tuple[str, str, int]]:
    """Stage the rows, insert the ones not stored yet; the (host, boot, seq) keys inserted."""
    with connection.cursor() as cursor, connection.wrap_database_errors:
        raw = cursor.cursor
        raw.execute(plan.stage_sql)
        raw.execute(f'TRUNCATE "{plan.stage}"')
        _copy(raw, plan.stage_copy_sql, rows)
        raw.execute(plan.merge_sql)
        return {(host, boot, seq) for host, boot, seq in raw.fetchall()}


def _copy(raw: Any, sql: str, rows: list[tuple[Any, ...]] | bytes, meanwhile: Callable[[], None] | None = None) -> None:
    # (psycopg's QueuedLibpqWriter, sending the rows from a thread so that `meanwhile`
    # starts at once, was measured slower: 1.13x against 1.26x over reading before the
    # COPY, bench_pg_ingest's writer phase, the threads contending on 2 CPUs.)
    with raw.copy(sql) as copy:
        if isinstance(rows, bytes):  # encode()'s COPY text: sent as it is
            copy.write(rows)
        else:
            write = copy.write_row
            for values in rows:
                write(values)
        if meanwhile is not None:
            meanwhile()


def _first_of_each(group: list[Record], stored: set[tuple[str, str, int]]) -> list[Record]:
    """The records whose key went in, each key once (a batch may repeat a record)."""
    fresh = []
    for rec in group:
        key = (rec.host_id, rec.boot_id, rec.seq)
        if key in stored:
            stored.discard(key)
            fresh.append(rec)
    return fresh


def _plan(kind: str) -> _Plan:
    if kind not in _plans:
        model = KIND_MODELS[kind]
        table = model._meta.db_table
        columns = ", ".join(f'"{name}"' for name in model.record_type.__struct_fields__)
        stage = f"nt_stage_{kind}"
        _plans[kind] = _Plan(
            table=table,
            partitioned=partitions.is_partitioned(kind),
            copy_sql=f'COPY "{table}" ({columns}) FROM STDIN',
            stage=stage,
            # ON COMMIT DELETE ROWS: a staged batch never outlives its transaction.
            stage_sql=(
                f'CREATE TEMPORARY TABLE IF NOT EXISTS "{stage}" ON COMMIT DELETE ROWS AS '
                f'SELECT {columns} FROM "{table}" WITH NO DATA'
            ),
            stage_copy_sql=f'COPY "{stage}" ({columns}) FROM STDIN',
            merge_sql=(
                f'INSERT INTO "{table}" ({columns}) SELECT {columns} FROM "{stage}" '
                "ON CONFLICT DO NOTHING RETURNING host_id, boot_id, seq"
            ),
        )
    return _plans[kind]

"""PostgreSQL: a batch of records written with COPY (psycopg 3's copy protocol) into day partitions.

Per kind, the day partitions the rows need are made sure of (partitions.py), then:

* the common batch, all new: one ``COPY table (columns) FROM STDIN`` straight into
  the partitioned table, under a savepoint. It is the raw COPY peer of
  bench/bench_pg_ingest.py plus the row building, nothing more.
* a batch with a record already stored (a collector's resend, a Redis redelivery
  after a writer died between commit and XACK): the unique index refuses the
  direct COPY, the savepoint is rolled back, and the rows are copied into a
  temporary staging table and moved with ``INSERT ... SELECT ... ON CONFLICT DO
  NOTHING RETURNING`` the keys that went in. So a redelivered batch is a duplicate,
  never a double, and the duplicate count and the Connection updates stay exact.

Staging writes every row twice (temporary table, then the table) and plans an
INSERT ... SELECT; the direct COPY avoids both for the common batch.
bench/bench_pg_ingest.py measures both paths (docs/benchmarks.md); on the shared
2-CPU machine they were within its noise of each other.
Called by store.py's ``_store`` on PostgreSQL, inside the batch's transaction.
Keep in sync with: store.py (StoreResult, the row builder), partitions.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, connection, transaction

from translators.records import Record
from webapp.traces import partitions
from webapp.traces.models import KIND_MODELS
from webapp.traces.schema import KIND_BY_TYPE
from webapp.traces.store import StoreResult, _table


@dataclass(frozen=True)
class _Plan:
    table: str
    partitioned: bool
    copy_sql: str  # COPY straight into the partitioned table
    stage: str  # the staging table's name (temporary, one per kind and session)
    stage_sql: str  # creates it when this session has not yet
    stage_copy_sql: str
    merge_sql: str  # staging -> table, returning the keys stored


_plans: dict[str, _Plan] = {}
# False: every batch goes through the staging table (bench/bench_pg_ingest.py measures both).
DIRECT_FIRST = True


def store(records: Sequence[Record]) -> StoreResult:
    result = StoreResult()
    groups: dict[str, list[Record]] = {}
    for rec in records:
        groups.setdefault(KIND_BY_TYPE[type(rec)], []).append(rec)
    for kind, group in groups.items():
        plan = _plan(kind)
        if plan.partitioned:
            partitions.ensure(plan.table, {partitions.day_of(rec.ts_wall) for rec in group})
        row = _table(kind).row
        rows = [row(rec) for rec in group]
        if DIRECT_FIRST and _copy_direct(plan, rows):
            result.stored += len(group)
            result.new.extend(group)
            continue
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


def _copy_direct(plan: _Plan, rows: list[tuple[Any, ...]]) -> bool:
    """COPY every row into the table; False (and nothing written) when one was already stored."""
    try:
        with transaction.atomic(), connection.cursor() as cursor, connection.wrap_database_errors:
            _copy(cursor.cursor, plan.copy_sql, rows)
    except IntegrityError:
        return False
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


def _copy(raw: Any, sql: str, rows: list[tuple[Any, ...]]) -> None:
    with raw.copy(sql) as copy:
        write = copy.write_row
        for values in rows:
            write(values)


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

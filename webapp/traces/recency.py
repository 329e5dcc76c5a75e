"""PostgreSQL: connections in order of recent activity through a coarse copy of last_seen.

The writer sets last_seen of about every active connection with every batch. PostgreSQL
(15) updates a row in place -- HOT: no new entry in any of the table's indexes -- only
when no indexed column changes, so one index over last_seen makes every such update
insert into each of the Connection table's 14 indexes (most of the writer's time beyond
a raw COPY's: docs/benchmarks.md). Migration 0016 therefore gives the table, on
PostgreSQL only, a stored generated column ``last_seen_bucket = floor(last_seen /
BUCKET_S)`` and puts it where last_seen was in every index (same index names), with a
fillfactor leaving room on each page for the new row versions: a connection's bucket
changes once per BUCKET_S seconds of activity, so the updates in between are HOT.

"Newest first" on PostgreSQL is ``ORDER BY last_seen_bucket DESC, last_seen DESC, id
DESC``: the same order (the bucket never decreases as last_seen grows), which the planner
serves with an index scan on the bucket and an incremental sort within the first buckets;
a range on last_seen also gets the matching range on the bucket, so that it stays an
index range. SQLite has no such column and keeps its (..., last_seen) indexes (it only
updates the indexes whose columns change): there these helpers change nothing.
The column is not a model field: Django never writes or returns it.
Keep in sync with: migrations/0016_connection_last_seen_bucket.py, models.py
(Connection indexes), tests/test_pg_connection_indexes.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypeVar

from django.db import connections
from django.db.models import BigIntegerField, Model, QuerySet
from django.db.models.expressions import RawSQL

BUCKET_S = 10  # seconds of last_seen per bucket: one non-HOT update per active connection per bucket
COLUMN = "last_seen_bucket"
ALIAS = "recency_bucket"  # the column as a queryset alias

M = TypeVar("M", bound=Model)
_INT64 = 2**63


def bucket_of(value: float) -> int:
    """The bucket of a last_seen value, as PostgreSQL computes it (IEEE division, then
    floor); a finite value beyond the column's range is held at its ends."""
    return max(-_INT64, min(_INT64 - 1, math.floor(value / BUCKET_S)))


def bucketed(qs: QuerySet[Any]) -> bool:
    """Connection rows on PostgreSQL: the table with the column."""
    from webapp.traces.models import Connection

    return qs.model is Connection and connections[qs.db].vendor == "postgresql"


def _with_alias(qs: QuerySet[M]) -> QuerySet[M]:
    if ALIAS in qs.query.annotations:
        return qs
    table = connections[qs.db].ops.quote_name(qs.model._meta.db_table)
    return qs.alias(**{ALIAS: RawSQL(f"{table}.{COLUMN}", [], output_field=BigIntegerField())})


def ordered(qs: QuerySet[M], order: Sequence[str]) -> QuerySet[M]:
    """qs.order_by(*order), order[0] being last_seen (or an annotation equal to it), ascending
    or descending; on PostgreSQL the bucket goes first, in the same direction."""
    if not bucketed(qs):
        return qs.order_by(*order)
    sign = "-" if order[0].startswith("-") else ""
    return _with_alias(qs).order_by(f"{sign}{ALIAS}", *order)


def at_most(qs: QuerySet[M], value: float) -> QuerySet[M]:
    """For a qs filtered on last_seen <= value (or < value): the same range on the bucket.

    Only ever a hint for the index: it keeps every row the last_seen filter keeps (not
    added for a value with no bucket, infinity or NaN)."""
    if not bucketed(qs) or not math.isfinite(value):
        return qs
    return _with_alias(qs).filter(**{f"{ALIAS}__lte": bucket_of(value)})


def at_least(qs: QuerySet[M], value: float) -> QuerySet[M]:
    """For a qs filtered on last_seen >= value (or > value): the same range on the bucket (a hint, as at_most's)."""
    if not bucketed(qs) or not math.isfinite(value):
        return qs
    return _with_alias(qs).filter(**{f"{ALIAS}__gte": bucket_of(value)})

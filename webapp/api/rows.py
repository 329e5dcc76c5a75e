"""Rows to JSON, and keyset (cursor) pagination, for the read API.

Record rows are returned in their wire form: the record's own fields from
``describe()`` (never a hand-kept list), with ``kind`` first. Pages are ordered
newest first on (time column, id) and continued with an opaque cursor holding the
last row's (time, id), so a page is one index range scan however deep it is.
Keep in sync with: webapp/traces/models.py (columns), docs/api.md (page shape).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from django.db.models import Model, Q, QuerySet

from translators.records import BY_KIND, describe
from webapp.api.params import BadParam, encode_cursor
from webapp.traces import recency
from webapp.traces.models import Connection, RecordModel


def record_columns(model: type[RecordModel]) -> tuple[str, ...]:
    return _columns(model.kind)


@functools.cache
def _columns(kind: str) -> tuple[str, ...]:
    return tuple(d.name for d in describe(BY_KIND[kind]))


def record_dicts(model: type[RecordModel], rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Wire-form dicts (kind first) from `.values("id", *record_columns(model))` rows."""
    names = record_columns(model)
    return [{"kind": model.kind, **{n: row[n] for n in names}} for row in rows]


CONNECTION_COLUMNS = tuple(f.name for f in Connection._meta.concrete_fields if f.name != "id")


def connection_dict(row: dict[str, Any]) -> dict[str, Any]:
    return {n: row[n] for n in CONNECTION_COLUMNS}


def keyset_page(
    qs: QuerySet[Any] | Sequence[QuerySet[Any]],
    time_field: str,
    columns: Sequence[str],
    limit: int,
    cursor: list[Any] | None,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page newest first on (time_field, id), and the cursor of the next page (None at the end).

    Several querysets are the branches of an OR ("port P on either side"): each is
    paged on its own index and the pages are merged, instead of one OR query that
    SQLite answers by sorting every match.
    """
    branches = [qs] if isinstance(qs, QuerySet) else list(qs)
    merged: dict[int, dict[str, Any]] = {}
    for branch in branches:
        for row in _rows_after(branch, time_field, columns, limit + 1, cursor):
            merged[row["id"]] = row
    rows = sorted(merged.values(), key=lambda r: (r[time_field], r["id"]), reverse=True)
    more = len(rows) > limit
    rows = rows[:limit]
    following = encode_cursor([rows[-1][time_field], rows[-1]["id"]]) if more else None
    return rows, following


def _rows_after(
    qs: QuerySet[Any], time_field: str, columns: Sequence[str], count: int, cursor: list[Any] | None
) -> list[dict[str, Any]]:
    if cursor is not None:
        if len(cursor) != 2 or not isinstance(cursor[1], int) or isinstance(cursor[0], str):
            raise BadParam("cursor is not a cursor this API gave out")
        when, last_id = cursor
        # "at or before `when`, minus the rows up to the last one shown": one index range
        # (an OR of the two cases makes SQLite give up the range and filter row by row).
        qs = qs.filter(Q(**{f"{time_field}__lte": when}) & ~Q(**{time_field: when, "id__gte": last_id}))
        if time_field == "last_seen":
            qs = recency.at_most(qs, when)  # PostgreSQL: the bucket's range too (recency.py)
    order = (f"-{time_field}", "-id")
    qs = recency.ordered(qs, order) if time_field == "last_seen" else qs.order_by(*order)
    return list(qs.values("id", *columns)[:count])


def model_dict(obj: Model, skip: Sequence[str] = ("id",)) -> dict[str, Any]:
    return {f.name: getattr(obj, f.attname) for f in obj._meta.concrete_fields if f.name not in skip}

"""PostgreSQL: many rows of one table updated by primary key in one statement.

``UPDATE t SET a = v.a, ... FROM unnest(%s::bigint[], %s::<type of a>[], ...) AS v(id, a, ...)
WHERE t.id = v.id``: the values travel as one array per column, so a thousand
connections cost one round trip and one plan instead of a thousand statements (an
executemany, even pipelined, was half of a writer's time in bench_pg_ingest.py).
Used by lifecycle.py on PostgreSQL; SQLite keeps its executemany.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection, models


def update_by_id(model: type[models.Model], names: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None:
    """rows: (value of names[0], ..., value of names[-1], id) each."""
    if not rows:
        return
    quote = connection.ops.quote_name
    fields = [model._meta.get_field(name) for name in names]
    columns = [quote(field.column) for field in fields]
    types = [field.db_type(connection) for field in fields]
    pk = model._meta.pk
    assert pk is not None
    arrays = ", ".join(f"%s::{kind}[]" for kind in [*types, pk.db_type(connection)])
    sql = (
        f"UPDATE {quote(model._meta.db_table)} AS t SET {', '.join(f'{c} = v.{c}' for c in columns)} "
        f"FROM unnest({arrays}) AS v({', '.join(columns)}, {quote('pk__')}) WHERE t.{quote(pk.column)} = v.{quote('pk__')}"
    )
    values = [list(column) for column in zip(*rows, strict=True)]
    with connection.cursor() as cursor:
        cursor.execute(sql, values)

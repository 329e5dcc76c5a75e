"""PostgreSQL: a batch's Connection rows read and written in one statement each.

The writer folds a batch's records into about one row per connection (a thousand
for a 5,000-record batch of the bench's mix):

* ``load``: ``SELECT json_agg(row) FROM table WHERE key = ANY(%s)``: one array
  parameter, one text value back that msgspec decodes in one C call (psycopg would
  build ~35 Python values per row). With ``version``, each row's ``xmin`` too (the
  transaction that wrote this version of it); with ``lock``, ``FOR UPDATE``. It may
  run on the side connection (``side_connection``): a second session, so that the
  writer reads the rows while its own connection is busy with the batch's COPY.
* ``update_by_id``: the changed rows in one ``UPDATE ... FROM unnest(arrays)``; with
  versions, only the rows still at the version read (``t.xmin = v.xmin``), and the
  ids it updated are returned: a row changed since it was read is left as it is,
  for the caller to read again (locked) and fold again (lifecycle.Fold.finish).
* ``changed_since``: which of the rows read are no longer the version read (the ones
  a batch read but left unchanged: no UPDATE tells).
* ``insert``: the new rows in one ``INSERT ... SELECT ... FROM json_populate_recordset``
  (msgspec encodes them in one call; new rows are few after a connection's first batch).

JSON numbers keep every value: msgspec writes the shortest text that reads back as
the same float, and PostgreSQL reads it correctly rounded. Keys the table has no
column for are ignored by json_populate_recordset; a key missing reads as NULL.
Used by lifecycle.py on PostgreSQL; SQLite keeps its parameters and executemany.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any

import msgspec
import psycopg
from django.db import connection, models

_encode = msgspec.json.Encoder().encode
VERSION = "xmin"  # the JSON key (and the folded row's field) of a row's version


def load(
    model: type[models.Model],
    names: Sequence[str],
    key: str,
    values: list[Any],
    into: Any,
    *,
    version: bool = False,
    lock: bool = False,
    side: psycopg.Connection[Any] | None = None,
) -> list[Any]:
    """The rows whose `key` column is one of `values`: `names` columns, decoded as list[into] by name.

    version: each row's xmin as VERSION too (text: PostgreSQL's JSON of an xid).
    lock: the rows locked FOR UPDATE until the transaction ends (not on `side`).
    side: read on this connection (side_connection()) instead of Django's.
    """
    if not values:
        return []
    assert not (lock and side is not None), "a lock belongs to the writing transaction"
    quote = connection.ops.quote_name
    columns = ", ".join(quote(model._meta.get_field(name).column) for name in names)
    if version:
        columns += f", xmin AS {VERSION}"
    field = model._meta.get_field(key)
    sql = (
        f"SELECT coalesce(json_agg(r), '[]')::text FROM (SELECT {columns} FROM {quote(model._meta.db_table)} "
        f"WHERE {quote(field.column)} = ANY(%s::{field.db_type(connection)}[]){' FOR UPDATE' if lock else ''}) AS r"
    )
    param = array_literal(field.db_type(connection), values)
    if side is not None:
        with side.cursor() as raw:
            raw.execute(sql, [param])
            row = raw.fetchone()
    else:
        with connection.cursor() as cursor:
            cursor.execute(sql, [param])
            row = cursor.fetchone()
    assert row is not None
    return msgspec.json.decode(row[0], type=list[into])


_side = threading.local()  # per thread, as Django's connections: .conn, .owner (Django's raw connection)


def side_connection() -> psycopg.Connection[Any] | None:
    """A second session to the database of Django's connection (same parameters,
    autocommit), kept for this thread: for reads that overlap what Django's
    connection is busy with (the writer's COPY). None where it cannot stand in
    for a read on Django's connection: not PostgreSQL, or inside a transaction
    the caller did not open (an outer atomic block: the rows it wrote are not
    visible to another session).

    It follows Django's connection: a new one once Django reconnects, and it is
    closed when Django's is (so a test database can be dropped).
    """
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return None
    connection.ensure_connection()
    owner = connection.connection
    conn: psycopg.Connection[Any] | None = getattr(_side, "conn", None)
    mine = getattr(_side, "owner", None)
    if conn is not None and (conn.closed or conn.broken or mine is None or mine() is not owner):
        close_side()
        conn = None
    if conn is None:
        conn = psycopg.Connection.connect(**connection.get_connection_params(), autocommit=True)
        _side.conn, _side.owner = conn, weakref.ref(owner)
        weakref.finalize(owner, conn.close)  # Django closed (and dropped) its connection
    return conn


def close_side() -> None:
    """Close this thread's side connection (a failed read, the writer's exit)."""
    conn = getattr(_side, "conn", None)
    _side.conn = _side.owner = None
    if conn is not None:
        conn.close()


def changed_since(model: type[models.Model], rows: Sequence[tuple[int, str]]) -> set[int]:
    """The ids of these (id, version read) rows that are no longer that version: changed or
    deleted by another transaction since they were read (one statement; none for no rows)."""
    if not rows:
        return set()
    quote = connection.ops.quote_name
    pk = model._meta.pk
    assert pk is not None
    sql = (
        f"SELECT v.pk FROM unnest(%s::{pk.db_type(connection)}[], %s::xid[]) AS v(pk, version) WHERE NOT EXISTS "
        f"(SELECT 1 FROM {quote(model._meta.db_table)} AS t WHERE t.{quote(pk.column)} = v.pk AND t.xmin = v.version)"
    )
    ids, versions = zip(*rows, strict=True)
    with connection.cursor() as cursor:
        cursor.execute(sql, [array_literal("bigint", ids), array_literal("xid", versions)])
        return {pk for (pk,) in cursor.fetchall()}


def insert(
    model: type[models.Model], names: Sequence[str], rows: Sequence[Any], *, key: Sequence[str] = ()
) -> list[tuple[Any, ...]]:
    """Insert new rows (objects msgspec encodes with a key per column name; others ignored).

    A plain INSERT: a row another transaction inserted since this one read the table
    raises IntegrityError on its unique key, so the batch is rolled back and stored
    again rather than overwriting it.
    key: columns that name a row: then (their values..., id, version) of each row inserted.
    """
    if not rows:
        return []
    quote = connection.ops.quote_name
    for name in names:
        assert model._meta.get_field(name).column == name, name  # JSON keys are column names
    table = quote(model._meta.db_table)
    columns = ", ".join(quote(name) for name in names)
    sql = f"INSERT INTO {table} ({columns}) SELECT {columns} FROM json_populate_recordset(NULL::{table}, %s::json)"
    pk = model._meta.pk
    assert pk is not None
    if key:
        sql += f" RETURNING {', '.join(quote(name) for name in key)}, {quote(pk.column)}, xmin::text"
    with connection.cursor() as cursor:
        cursor.execute(sql, [_encode(rows).decode()])
        return [tuple(row) for row in cursor.fetchall()] if key else []


def update_by_id(
    model: type[models.Model], names: Sequence[str], rows: Sequence[tuple[Any, ...]], *, versioned: bool = False
) -> dict[int, str] | None:
    """UPDATE rows by primary key, one statement: ``UPDATE t SET a = v.a, ... FROM
    unnest(%s::bigint[], %s::<type of a>[], ...) AS v(id, a, ...) WHERE t.id = v.id``.

    One typed array per column, the union of the columns any row changed: PostgreSQL
    reads arrays ~20x faster than json_populate_recordset reads a document (1.5 ms
    against 30 ms for 1,000 rows), and an unchanged column written again costs it
    nothing more (an update that is not HOT adds an entry to every index anyway).
    rows: (value of names[0], ..., value of names[-1], id) each, then the version
    read (load's VERSION) when `versioned`: then only the rows still at that version
    are updated, and returned: id -> the new version (None otherwise).
    """
    if not rows:
        return {} if versioned else None
    quote = connection.ops.quote_name
    fields = [model._meta.get_field(name) for name in names]
    columns = [quote(field.column) for field in fields]
    types = [field.db_type(connection) for field in fields]
    pk = model._meta.pk
    assert pk is not None
    types.append(pk.db_type(connection))
    key = [quote("pk__")]
    if versioned:
        types.append("xid")  # the version's text, read as an xid
        key.append(quote("version__"))
    arrays = ", ".join(f"%s::{kind}[]" for kind in types)
    sql = (
        f"UPDATE {quote(model._meta.db_table)} AS t SET {', '.join(f'{c} = v.{c}' for c in columns)} "
        f"FROM unnest({arrays}) AS v({', '.join([*columns, *key])}) WHERE t.{quote(pk.column)} = v.{key[0]}"
    )
    if versioned:
        sql += f" AND t.xmin = v.{key[1]} RETURNING t.{quote(pk.column)}, t.xmin::text"
    values = [array_literal(kind, column) for kind, column in zip(types, zip(*rows, strict=True), strict=True)]
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
        return dict(cursor.fetchall()) if versioned else None


_TEXT_TYPES = ("text", "varchar", "xid")


def array_literal(kind: str, values: Sequence[Any]) -> str:
    """PostgreSQL's text form of an array of `kind` holding `values` (None: NULL), for a
    ``%s::kind[]`` parameter.

    psycopg's list dumper formats each element in Python (and a text one through a
    regular expression): 16% of the writer's CPU (cProfile), for a batch's UPDATE of
    1,000 rows. Here numbers and bools are one msgspec JSON encoding (JSON's numbers,
    true/false and null are what the array parser reads: floats in their shortest
    exact form, null case-insensitively as NULL), with its brackets made braces; a
    text element is double-quoted with its backslashes and double quotes escaped, the
    only characters special inside quotes.
    """
    if kind.startswith(_TEXT_TYPES):
        return "{" + ",".join("NULL" if value is None else _quoted(value) for value in values) + "}"
    body = _encode(values)[1:-1].decode()
    if body.count("null") != values.count(None):  # JSON has no inf or nan: msgspec wrote null
        body = ",".join("NULL" if value is None else repr(value) for value in values)  # inf, -inf, nan
    return "{" + body + "}"


def _quoted(value: str) -> str:
    if "\\" in value or '"' in value:
        value = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{value}"'

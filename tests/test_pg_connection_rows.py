"""PostgreSQL: a batch's Connection rows read and written in one statement each (webapp/traces/pgbulk.py).

Run with `-m postgres` and DATABASE_URL; on SQLite the fold keeps its executemany.
"""

from __future__ import annotations

import math

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction

from webapp.traces import lifecycle, pgbulk
from webapp.traces.models import Connection

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
NAMES = [*lifecycle.KEY_FIELDS, *lifecycle.UPDATE_FIELDS]


@pytest.fixture(autouse=True)
def _postgres_only() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("pgbulk is PostgreSQL's (run with -m postgres and DATABASE_URL)")


def conn(uuid: str, **values: object) -> object:
    return lifecycle._Conn(None, "h", "b", uuid, first_seen=1.5, last_seen=2.0, **values)


def test_rows_go_in_and_come_back_with_every_value() -> None:
    big = 2**63 - 1
    pgbulk.insert(Connection, NAMES, [conn("u1", bytes_orig=big, comm='x"y', active=False)])
    [row] = pgbulk.load(Connection, ["id", *NAMES], "conn_uuid", ["u1", "u2"], lifecycle._Conn)
    assert (row.conn_uuid, row.first_seen, row.last_seen, row.bytes_orig, row.comm) == ("u1", 1.5, 2.0, big, 'x"y')
    assert (row.active, row.closed, row.retransmits, row.state) == (False, False, 0, None)
    assert row.id == Connection.objects.get().id


def test_the_changed_columns_of_loaded_rows_are_updated_in_place() -> None:
    pgbulk.insert(Connection, NAMES, [conn("u1"), conn("u2")])
    rows = {
        row.conn_uuid: row
        for row in pgbulk.load(Connection, ["id", *NAMES], "conn_uuid", ["u1", "u2"], lifecycle._Conn)
    }
    for row in rows.values():
        row.loaded = lifecycle._values(row)
    rows["u1"].last_seen, rows["u1"].state = 3.0, "CLOSED"
    rows["u2"].retransmits = 2
    positions, values = lifecycle._changes(rows.values())
    assert [lifecycle.UPDATE_FIELDS[i] for i in positions] == ["state", "last_seen", "retransmits"]
    pgbulk.update_by_id(Connection, [lifecycle.UPDATE_FIELDS[i] for i in positions], values)
    assert sorted(Connection.objects.values_list("id", "conn_uuid", "last_seen", "state", "retransmits")) == [
        (rows["u1"].id, "u1", 3.0, "CLOSED", 0),
        (rows["u2"].id, "u2", 2.0, None, 2),
    ]


def test_a_new_row_another_transaction_inserted_first_is_refused_not_overwritten() -> None:
    # The fold read no row for u1, another writer inserted one since: the INSERT's error.
    Connection.objects.create(host_id="h", boot_id="b", conn_uuid="u1", first_seen=0.5, last_seen=9.0, resets=4)
    with pytest.raises(IntegrityError, match="nt_conn_host_uuid"), transaction.atomic():
        pgbulk.insert(Connection, NAMES, [conn("u1"), conn("u2")])
    assert list(Connection.objects.values_list("conn_uuid", "last_seen", "resets")) == [("u1", 9.0, 4)]


@pytest.mark.django_db(transaction=True)
def test_a_versioned_update_writes_only_the_rows_still_at_the_version_read() -> None:
    # A version is the transaction that wrote it (xmin): another transaction's change is a new one.
    pgbulk.insert(Connection, NAMES, [conn("u1"), conn("u2")])
    rows = {
        row.conn_uuid: row
        for row in pgbulk.load(Connection, ["id", *NAMES], "conn_uuid", ["u1", "u2"], lifecycle._Conn, version=True)
    }
    assert all(isinstance(row.xmin, str) for row in rows.values())
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
        other.execute(f"UPDATE {Connection._meta.db_table} SET resets = 7 WHERE conn_uuid = 'u2'")
    values = [(3.0, row.id, row.xmin) for row in rows.values()]
    assert set(pgbulk.update_by_id(Connection, ["last_seen"], values, versioned=True) or ()) == {rows["u1"].id}
    assert sorted(Connection.objects.values_list("conn_uuid", "last_seen", "resets")) == [
        ("u1", 3.0, 0),
        ("u2", 2.0, 7),
    ]


AWKWARD = ['a"b', "back\\slash", "", "NULL", "null", "{x,y}", " spaced ", "tab\tnew\nline", "ü ∞", '\\"', "'", None]


def test_array_parameters_keep_every_value() -> None:
    cases = {
        "text": AWKWARD,
        "bigint": [0, -1, 2**63 - 1, -(2**63), None],
        "integer": [7, None, -2147483648],
        "double precision": [0.1, 1e-300, 1e300, -0.0, 123456789.12345679, 2.0, 3, None],
        "float8": [1.5, math.inf, -math.inf, None],  # not JSON numbers: kept, never made NULL
        "boolean": [True, False, None],
    }
    with connection.cursor() as cursor:
        for kind, values in cases.items():
            cursor.execute(f"SELECT %s::{kind}[]", [pgbulk.array_literal(kind, values)])
            assert cursor.fetchone()[0] == values, kind
        cursor.execute("SELECT %s::float8[]", [pgbulk.array_literal("float8", [math.nan, None])])
        nan, null = cursor.fetchone()[0]
        assert math.isnan(nan) and null is None
        cursor.execute("SELECT %s::bigint[]", [pgbulk.array_literal("bigint", [])])
        assert cursor.fetchone()[0] == []


def test_text_values_come_back_as_written_by_a_batch_update() -> None:
    pgbulk.insert(Connection, NAMES, [conn(f"u{i}") for i in range(len(AWKWARD))])
    rows = pgbulk.load(Connection, ["id", *NAMES], "conn_uuid", [f"u{i}" for i in range(len(AWKWARD))], lifecycle._Conn)
    by_uuid = {row.conn_uuid: row.id for row in rows}
    values = [(comm, 2.5, by_uuid[f"u{i}"]) for i, comm in enumerate(AWKWARD)]
    pgbulk.update_by_id(Connection, ["comm", "last_seen"], values)
    stored = dict(Connection.objects.values_list("conn_uuid", "comm"))
    assert [stored[f"u{i}"] for i in range(len(AWKWARD))] == AWKWARD

"""PostgreSQL: the Connection indexes name last_seen's bucket, not last_seen, so that the
writer's updates of last_seen are HOT (webapp/traces/recency.py, migration 0016); pages
newest first are still in exact last_seen order.

Run with `-m postgres` and DATABASE_URL. Asserts which indexes exist and what
PostgreSQL counted as HOT updates in this transaction, never timings.
"""

from __future__ import annotations

import pytest
from django.db import connection

from webapp.api.rows import CONNECTION_COLUMNS, keyset_page
from webapp.dashboard import queries
from webapp.traces import lifecycle, pgbulk, recency
from webapp.traces.models import Connection

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
TABLE = Connection._meta.db_table
NAMES = [*lifecycle.KEY_FIELDS, *lifecycle.UPDATE_FIELDS]


@pytest.fixture(autouse=True)
def _postgres_only() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the bucket column is PostgreSQL's (run with -m postgres and DATABASE_URL)")


def _index_columns() -> dict[str, list[str]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.relname, array_agg(a.attname ORDER BY k.ord) FROM pg_index x"
            " JOIN pg_class i ON i.oid = x.indexrelid"
            " CROSS JOIN LATERAL unnest(x.indkey) WITH ORDINALITY AS k(attnum, ord)"
            " JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum"
            " WHERE x.indrelid = %s::regclass GROUP BY i.relname",
            [TABLE],
        )
        return dict(cursor.fetchall())


def _hot_updates() -> tuple[int, int]:
    """(updates, HOT updates) of the Connection table in this transaction."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_stat_get_xact_tuples_updated(%s::regclass), pg_stat_get_xact_tuples_hot_updated(%s::regclass)",
            [TABLE, TABLE],
        )
        row = cursor.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_no_index_names_last_seen_and_each_model_index_exists_by_name() -> None:
    indexes = _index_columns()
    assert not [name for name, columns in indexes.items() if "last_seen" in columns]
    for index in Connection._meta.indexes:  # every Meta index, under its name
        wanted = [recency.COLUMN if f == "last_seen" else f for f in index.fields]
        assert indexes[index.name] == wanted, index.name
    assert indexes["nt_conn_last"] == [recency.COLUMN]
    assert indexes["nt_conn_host_uuid"] == ["host_id", "conn_uuid"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", [TABLE])
        assert cursor.fetchone() == (["fillfactor=70"],)


def test_the_writers_updates_of_last_seen_within_a_bucket_are_hot_and_a_new_bucket_is_not() -> None:
    start = 1_700_000_000.0  # a bucket's first second (BUCKET_S divides it)
    assert recency.bucket_of(start) * recency.BUCKET_S == start
    # Few rows: inside one transaction no old version can be pruned, so the page must hold
    # every new one (across batches, fillfactor keeps that room: the test above).
    new = [
        lifecycle._Conn(None, "h", "b", f"u{i}", first_seen=start, last_seen=start, sport=i, state="ESTABLISHED")
        for i in range(8)
    ]
    pgbulk.insert(Connection, NAMES, new)
    rows = pgbulk.load(Connection, ["id", *NAMES], "conn_uuid", [c.conn_uuid for c in new], lifecycle._Conn)
    before = _hot_updates()
    for step in (1.0, 2.5, recency.BUCKET_S - 0.5):  # three batches inside the bucket
        for row in rows:
            row.loaded = lifecycle._values(row)
            row.last_seen, row.bytes_out = start + step, int(step * 100)
        positions, values = lifecycle._changes(rows)
        pgbulk.update_by_id(Connection, [lifecycle.UPDATE_FIELDS[i] for i in positions], values)
    updates, hot = (a - b for a, b in zip(_hot_updates(), before, strict=True))
    assert (updates, hot) == (24, 24)
    before = _hot_updates()
    for row in rows[:5]:  # the next bucket: its indexes get new entries
        row.loaded = lifecycle._values(row)
        row.last_seen = start + recency.BUCKET_S
    positions, values = lifecycle._changes(rows[:5])
    pgbulk.update_by_id(Connection, [lifecycle.UPDATE_FIELDS[i] for i in positions], values)
    updates, hot = (a - b for a, b in zip(_hot_updates(), before, strict=True))
    assert (updates, hot) == (5, 0)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {TABLE} WHERE {recency.COLUMN} = %s", [recency.bucket_of(start) + 1])
        assert cursor.fetchone() == (5,)


def _store(count: int) -> None:
    # last_seen spread over many buckets, several rows sharing a value (ties broken by id)
    Connection.objects.bulk_create(
        Connection(
            host_id=f"h{i % 2}",
            boot_id="b",
            conn_uuid=f"u{i}",
            first_seen=0.0,
            last_seen=1000.0 + (i * 7919) % 97 * 0.75,
            sport=443 if i % 3 else 80,
        )  # fmt: skip
        for i in range(count)
    )


def test_api_pages_newest_first_walk_every_row_in_last_seen_order() -> None:
    _store(300)
    expected = list(Connection.objects.order_by("-last_seen", "-id").values_list("id", flat=True))
    seen: list[int] = []
    cursor = None
    while True:
        rows, following = keyset_page(Connection.objects.all(), "last_seen", CONNECTION_COLUMNS, 40, cursor)
        seen += [row["id"] for row in rows]
        if following is None:
            break
        from webapp.api.params import decode_cursor

        cursor = decode_cursor(following)
    assert seen == expected
    branches = [Connection.objects.filter(sport=443), Connection.objects.filter(host_id="h1")]
    rows, _ = keyset_page(branches, "last_seen", CONNECTION_COLUMNS, 1000, None)
    wanted = Connection.objects.filter(sport=443) | Connection.objects.filter(host_id="h1")
    assert [r["id"] for r in rows] == list(wanted.order_by("-last_seen", "-id").values_list("id", flat=True))


@pytest.mark.parametrize("sort", ["-last", "last"])
def test_dashboard_pages_by_last_activity_walk_every_row_in_order(sort: str) -> None:
    _store(300)
    order = ("-last_seen", "-id") if sort == "-last" else ("last_seen", "id")
    expected = list(Connection.objects.order_by(*order).values_list("id", flat=True))
    seen: list[int] = []
    cursor = None
    while True:
        page = queries.page(queries.annotated(), sort, cursor, 50)
        seen += [row.pk for row in page.rows]
        if page.next is None:
            break
        cursor = page.next
    assert seen == expected


def test_newest_first_can_be_served_by_the_bucket_index() -> None:
    _store(300)
    with connection.cursor() as cursor:  # 300 rows: a sequential scan would be cheaper
        cursor.execute("SET LOCAL enable_seqscan = off")
    qs = recency.ordered(Connection.objects.all(), ("-last_seen", "-id")).values("id")[:10]
    plan = qs.explain()
    assert "nt_conn_last" in plan, plan


@pytest.mark.parametrize("value", [1060.0, 1000.0, 0.0, -1e300, 1e300, float("inf"), float("-inf"), float("nan")])
def test_the_bucket_ranges_keep_exactly_the_rows_of_the_last_seen_ranges(value: float) -> None:
    _store(300)
    rows = Connection.objects.all()
    for narrowed, plain in (
        (recency.at_most(rows.filter(last_seen__lte=value), value), rows.filter(last_seen__lte=value)),
        (recency.at_least(rows.filter(last_seen__gte=value), value), rows.filter(last_seen__gte=value)),
    ):
        assert sorted(narrowed.values_list("id", flat=True)) == sorted(plain.values_list("id", flat=True))


def test_the_retransmitting_connections_of_a_host_are_counted_from_an_index() -> None:
    _store(300)
    Connection.objects.filter(sport=80).update(retransmits=2)
    with connection.cursor() as cursor:  # 300 rows: a sequential scan would be cheaper
        cursor.execute("SET LOCAL enable_seqscan = off")
    qs = queries.filtered("host h1 and retrans > 0")
    plan = qs.values("id").order_by().explain()
    assert "nt_conn_retrans_host" in plan, plan
    assert qs.count() == Connection.objects.filter(host_id="h1", sport=80).count() > 0

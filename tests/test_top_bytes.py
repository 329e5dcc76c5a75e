"""The Overview's top connections by bytes (dashboard/top_bytes.py) are exactly the
largest by bytes_orig + bytes_resp, ties newest first, on both databases; on PostgreSQL
they come from the bytes_bucket index (migration 0036), and an update of a connection's
bytes within its bucket stays HOT. Exact rows and query plans, never timings; PostgreSQL
with `-m postgres` and DATABASE_URL."""

from __future__ import annotations

import pytest
from django.db import connection

from webapp.dashboard import queries, top_bytes
from webapp.traces.models import Connection

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
TABLE = Connection._meta.db_table


def _store(count: int) -> None:
    Connection.objects.bulk_create(
        Connection(
            host_id="capture:x" if i % 13 == 0 else f"h{i % 2}",
            boot_id="b",
            conn_uuid=f"u{i}",
            first_seen=0.0,
            last_seen=1000.0 + i,
            bytes_orig=None if i % 5 == 0 else (i * 7919) % 5000,
            bytes_resp=None if i % 7 == 0 else (i * 104729) % 300,
        )  # fmt: skip
        for i in range(count)
    )
    Connection.objects.bulk_create(  # the largest three: equal bytes, the newest first
        Connection(host_id="h1", boot_id="b", conn_uuid=f"t{i}", first_seen=0.0, last_seen=900.0 + i, bytes_orig=9000)
        for i in range(3)
    )


@pytest.mark.parametrize("limit", [1, 10, 400])
def test_the_top_is_the_largest_by_bytes_ties_newest_first(limit: int) -> None:
    _store(400)
    conns = queries.annotated().exclude(host_id__startswith="capture:")
    got = list(top_bytes.ordered(conns).values_list("conn_uuid", flat=True)[:limit])
    rows = [c for c in Connection.objects.all() if not c.host_id.startswith("capture:")]
    total = {c.conn_uuid: (c.bytes_orig or 0) + (c.bytes_resp or 0) for c in rows}
    want = sorted((c for c in rows if total[c.conn_uuid] > 0), key=lambda c: (-total[c.conn_uuid], -c.last_seen))
    assert got == [c.conn_uuid for c in want][:limit]
    assert got[:3] == ["t2", "t1", "t0"][:limit]


@pytest.fixture
def _postgres() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the bucket column is PostgreSQL's (run with -m postgres and DATABASE_URL)")


@pytest.mark.usefixtures("_postgres")
def test_postgresql_reads_the_top_from_the_bucket_index() -> None:
    _store(300)
    with connection.cursor() as cursor:  # 300 rows: a sequential scan would be cheaper
        # the table's statistics, as autovacuum keeps them at volume: unanalysed, the planner
        # took it for one row and sorted it whole (CI's PostgreSQL pass, once)
        cursor.execute(f"ANALYZE {TABLE}")
        cursor.execute("SET LOCAL enable_seqscan = off")
    plan = top_bytes.ordered(queries.annotated()).values("id")[:10].explain()
    assert "nt_conn_bytes_bucket" in plan and "Incremental Sort" in plan, plan


def _hot_updates() -> tuple[int, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_stat_get_xact_tuples_updated(%s::regclass), pg_stat_get_xact_tuples_hot_updated(%s::regclass)",
            [TABLE, TABLE],
        )
        row = cursor.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.mark.usefixtures("_postgres")
def test_bytes_growing_within_a_bucket_update_in_place() -> None:
    Connection.objects.bulk_create(
        Connection(host_id="h", boot_id="b", conn_uuid=f"u{i}", first_seen=0.0, last_seen=1000.0, bytes_orig=10**6)
        for i in range(5)
    )
    before = _hot_updates()
    Connection.objects.update(bytes_orig=10**6 + 5000)  # +0.5 %: the same bucket
    Connection.objects.filter(conn_uuid__in=["u0", "u1"]).update(bytes_orig=2 * 10**6)  # a new bucket
    updates, hot = (a - b for a, b in zip(_hot_updates(), before, strict=True))
    assert (updates, hot) == (7, 5)

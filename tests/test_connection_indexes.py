"""Connection indexes serve the read API's port/address filters and the sort by opening time.

SQLite's query plan for each query names the index, and none sorts in a temporary
B-tree: the pages come straight off the index, newest (or oldest) first.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.models import QuerySet

from webapp.dashboard.queries import SORTS, annotated
from webapp.traces.models import Connection

pytestmark = pytest.mark.django_db


def plan(qs: QuerySet[Any]) -> str:
    sql, params = qs.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        return "\n".join(str(row[-1]) for row in cursor.fetchall())


def api_branch(**side: Any) -> QuerySet[Any]:
    # The query of /api/connections?port=P (or addr=A), one branch per side (api/rows.py).
    return Connection.objects.filter(**side).order_by("-last_seen", "-id").values("id", "conn_uuid")[:51]


@pytest.mark.skipif(connection.vendor != "sqlite", reason="query plans are SQLite's")
@pytest.mark.parametrize(
    ("side", "index"),
    [
        ({"sport": 443}, "nt_conn_sport_last"),
        ({"dport": 443}, "nt_conn_dport_last"),
        ({"src": "10.0.0.1"}, "nt_conn_src_last"),
        ({"dst": "10.0.0.2"}, "nt_conn_dst_last"),
    ],
)
def test_a_port_or_address_branch_pages_off_its_own_index(side: dict[str, Any], index: str) -> None:
    found = plan(api_branch(**side))
    assert f"USING INDEX {index}" in found
    assert "TEMP B-TREE" not in found


@pytest.mark.skipif(connection.vendor != "sqlite", reason="query plans are SQLite's")
def test_a_keyset_page_after_a_cursor_stays_on_the_index() -> None:
    qs = Connection.objects.filter(sport=443, last_seen__lte=1000.0).exclude(last_seen=1000.0, id__gte=7)
    found = plan(qs.order_by("-last_seen", "-id").values("id")[:51])
    assert "INDEX nt_conn_sport_last (sport=? AND last_seen<?)" in found
    assert "TEMP B-TREE" not in found


@pytest.mark.skipif(connection.vendor != "sqlite", reason="query plans are SQLite's")
def test_sorting_by_opening_time_reads_the_first_seen_index() -> None:
    # The dashboard's sort "start" (queries.page): narrow (id, key) pairs in key order.
    qs = annotated().annotate(sort_key=SORTS["start"].expr)
    found = plan(qs.order_by("-sort_key", "-id").values_list("id", "sort_key")[:51])
    assert "nt_conn_first" in found
    assert "TEMP B-TREE" not in found


@pytest.mark.skipif(connection.vendor != "sqlite", reason="query plans are SQLite's")
def test_the_until_filter_reads_the_first_seen_index() -> None:
    found = plan(Connection.objects.filter(first_seen__lte=50.0).values("id"))
    assert "USING COVERING INDEX nt_conn_first (first_seen<?)" in found


def test_the_filters_return_exactly_the_matching_connections() -> None:
    rows = [
        Connection(host_id="h", boot_id="b", conn_uuid=f"u{i}", sport=40000 + i, dport=443 if i % 2 else 80,
                   src="10.0.0.1", dst=f"10.0.0.{2 + i % 3}", first_seen=float(i), last_seen=float(100 + i))
        for i in range(6)
    ]  # fmt: skip
    Connection.objects.bulk_create(rows)
    assert [r["conn_uuid"] for r in api_branch(dport=443)] == ["u5", "u3", "u1"]
    assert [r["conn_uuid"] for r in api_branch(sport=40002)] == ["u2"]
    assert [r["conn_uuid"] for r in api_branch(dst="10.0.0.2")] == ["u3", "u0"]
    assert [r["conn_uuid"] for r in api_branch(src="10.0.0.1")] == ["u5", "u4", "u3", "u2", "u1", "u0"]
    assert list(
        Connection.objects.filter(first_seen__lte=1.0).order_by("first_seen").values_list("conn_uuid", flat=True)
    ) == ["u0", "u1"]

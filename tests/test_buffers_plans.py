"""The buffers page's row queries that stay on the rows at volume walk an index instead
of sorting every stored record: its newest drops (skb_drop by ts_ns, of all hosts or of
one) and its newest first sightings (skb_event's partial index per first stage). Query
plans, never timings; SQLite, and PostgreSQL with `-m postgres` and DATABASE_URL."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from translators.records import SkbDrop, SkbEvent
from webapp.dashboard import buffers
from webapp.traces.schema import FIRST_STAGES, index_name
from webapp.traces.store import store_batch

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
ENVELOPE: dict[str, Any] = {"host_id": "web1", "boot_id": "b", "provider": "skb", "probe": "m"}


def _walks(plan: str, index: str) -> bool:
    """The plan reads in order down `index` (PostgreSQL: an index of the day partition
    made from it, named after the partition) and sorts nothing."""
    if connection.vendor == "postgresql":
        return "Index Scan Backward" in plan and "Sort" not in plan and "Seq Scan" not in plan
    return index in plan and "TEMP B-TREE" not in plan


def _plans(run: object) -> list[tuple[str, str]]:
    """(sql, plan) of each query on a record table that calling run() makes."""
    now = time.time()  # a row of each table (PostgreSQL: so that today's partition exists)
    store_batch([
        SkbEvent(**ENVELOPE, seq=1, ts_ns=1, ts_wall=now, skb_uid=1, stage="tx-first"),
        SkbDrop(**ENVELOPE, seq=2, ts_ns=2, ts_wall=now, skb_uid=2, drop_reason=2, drop_reason_str="NO_SOCKET"),
    ])  # fmt: skip
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":  # empty tables: a sequential scan would be cheaper
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_bitmapscan = off")
    with CaptureQueriesContext(connection) as captured:
        run()  # type: ignore[operator]
    out = []
    explain = "EXPLAIN" if connection.vendor == "postgresql" else "EXPLAIN QUERY PLAN"
    for query in captured.captured_queries:
        sql = query["sql"]
        if "traces_skbevent" not in sql and "traces_skbdrop" not in sql:
            continue
        with connection.cursor() as cursor:
            cursor.execute(f"{explain} {sql}")
            out.append((sql, " | ".join(str(row[-1]) for row in cursor.fetchall())))
    return out


@pytest.mark.parametrize("host", [None, "web1"])
def test_the_newest_first_sightings_walk_each_stages_partial_index(host: str | None) -> None:
    plans = _plans(lambda: buffers._recent_uids(host))
    assert len(plans) == 2
    for stage, (sql, plan) in zip(FIRST_STAGES, plans, strict=True):
        assert _walks(plan, index_name("skb_event", *(["host_id"] if host else []), "ts_ns", stage)), (sql, plan)


@pytest.mark.parametrize(("host", "index"), [(None, ("ts_ns",)), ("web1", ("host_id", "ts_ns"))])
def test_the_newest_drops_walk_an_index_on_ts_ns(host: str | None, index: tuple[str, ...]) -> None:
    plans = _plans(lambda: buffers.summary(host, None, None, False))
    recent = [(sql, plan) for sql, plan in plans if "traces_skbdrop" in sql and "LIMIT 100" in sql]
    assert len(recent) == 1, plans
    sql, plan = recent[0]
    assert _walks(plan, index_name("skb_drop", *index)), (sql, plan)

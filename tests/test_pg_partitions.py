"""PostgreSQL storage: day partitions, COPY ingest, exact duplicates, retention by dropping partitions.

Runs only on PostgreSQL (the `postgres` pass of scripts/test: DATABASE_URL set).
"""
# ruff: noqa: F811 -- pytest fixtures imported from webapp_cast are redefined as test arguments

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection
from webapp_cast import retransmit

from webapp.traces import partitions
from webapp.traces.models import KIND_MODELS, Connection, TcpRetransmit
from webapp.traces.retention import Policy, trim
from webapp.traces.store import store_batch

DAY = 86400
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres,
    pytest.mark.skipif(
        "postgresql" not in settings.DATABASES["default"]["ENGINE"], reason="needs DATABASE_URL=postgres://..."
    ),
]


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    # transaction=True tests truncate tables but partitions stay: the cache is still true,
    # yet a test that drops partitions must not leave a stale entry for the next one.
    partitions.forget()


def _on_day(day: int, seq: int) -> object:
    return retransmit("host-a", seq, ts_wall=day * DAY + 3600.0 + seq)


def test_every_record_table_but_alerts_is_partitioned_by_ts_wall_with_the_key_widened_by_it() -> None:
    with connection.cursor() as cursor:
        for kind, model in KIND_MODELS.items():
            table = model._meta.db_table
            if kind == "alert":  # acknowledgements hold a foreign key to its id
                cursor.execute("SELECT relkind FROM pg_class WHERE relname = %s", [table])
                assert cursor.fetchone() == ("r",)
                continue
            cursor.execute("SELECT c.relkind, pg_get_partkeydef(c.oid) FROM pg_class c WHERE c.relname = %s", [table])
            assert cursor.fetchone() == ("p", "RANGE (ts_wall)"), table
            cursor.execute(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'u'",
                [table],
            )
            assert cursor.fetchall() == [("UNIQUE (host_id, boot_id, seq, ts_wall)",)], table


def test_records_of_three_days_land_in_their_day_partitions() -> None:
    batch = [_on_day(20000, 1), _on_day(20000, 2), _on_day(20001, 3), _on_day(20003, 4)]
    result = store_batch(batch)
    assert (result.stored, result.duplicates) == (4, 0)
    table = TcpRetransmit._meta.db_table
    names = partitions.partitions(table)
    assert [n for n in names if n.endswith(("20241004", "20241005", "20241007"))] == [
        f"{table}_p20241004", f"{table}_p20241005", f"{table}_p20241007",
    ]  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT tableoid::regclass::text, seq FROM "{table}" ORDER BY seq')
        assert cursor.fetchall() == [
            (f"{table}_p20241004", 1), (f"{table}_p20241004", 2), (f"{table}_p20241005", 3), (f"{table}_p20241007", 4),
        ]  # fmt: skip


def test_a_redelivered_batch_is_a_duplicate_and_a_half_new_one_stores_only_the_new_half() -> None:
    first = [_on_day(20000, seq) for seq in range(1, 6)]
    stored = store_batch(first)
    assert (stored.stored, stored.duplicates) == (5, 0)
    again = store_batch(first)
    assert (again.stored, again.duplicates, again.new) == (0, 5, [])
    mixed = [_on_day(20000, seq) for seq in range(4, 9)] + [_on_day(20000, 8)]
    result = store_batch(mixed)
    assert (result.stored, result.duplicates) == (3, 3)
    assert [rec.seq for rec in result.new] == [6, 7, 8]
    assert list(TcpRetransmit.objects.order_by("seq").values_list("seq", flat=True)) == list(range(1, 9))
    assert Connection.objects.get().retransmits == 8  # the duplicates did not count twice


def test_retention_drops_whole_old_day_partitions_and_deletes_rows_of_the_cutoff_day() -> None:
    early = retransmit("host-a", 5, ts_wall=20001 * DAY + 100.0)
    store_batch([_on_day(20000, 1), _on_day(20000, 2), _on_day(20001, 3), _on_day(20002, 4), early])
    table = TcpRetransmit._meta.db_table
    # Cutoff 20001 days + 1 hour: day 20000 goes whole (2 rows), seq 5 of the cutoff's
    # day is deleted row by row, seq 3 (20001 days + 3603 s) stays.
    now = 20001 * DAY + 3600.0 + 5 * DAY
    deleted = trim(Policy(days=5, rows=0, batch=100), now=now)
    assert deleted[table] == 3
    assert f"{table}_p20241004" not in partitions.partitions(table)
    assert f"{table}_p20241005" in partitions.partitions(table)
    assert list(TcpRetransmit.objects.order_by("seq").values_list("seq", flat=True)) == [3, 4]
    # Records of a dropped day arriving late get their partition back.
    assert store_batch([_on_day(20000, 9)]).stored == 1
    assert f"{table}_p20241004" in partitions.partitions(table)


def test_partitions_are_created_ahead_for_today_and_the_next_days() -> None:
    now = 20100 * DAY + 100.0
    partitions.ensure_ahead(now=now, ahead=2)
    for table in partitions.record_tables():
        names = partitions.partitions(table)
        assert {f"{table}_p20250112", f"{table}_p20250113", f"{table}_p20250114"} <= set(names)
        assert f"{table}_p20250115" not in names

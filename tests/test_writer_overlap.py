"""The scale-out writer overlaps its own work with PostgreSQL's (webapp/traces/store.store_new_batch):
while the server stores the batch's largest COPY it decodes the views, reads the batch's
Connection rows on a second session (pgbulk.side_connection) and folds them. That read is
outside the batch's transaction and takes no lock, so a row is written back only if it
is still the version read; one another transaction changed or deleted meanwhile is read
again, locked, and folded again. Every outcome must equal storing the same batches one
after the other with the other transaction's change first.

PostgreSQL only (`-m postgres` with DATABASE_URL); transactional tests: the side session
cannot see a test transaction's rows, so inside one the writer reads after the COPY
(tests/test_writer_view.py covers that path).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection
from test_writer_view import HOST, as_read, empty, every_kind, stored

from translators import records as r
from webapp.bus.writer import store_entry
from webapp.traces import lifecycle, pgbulk
from webapp.traces.models import Connection
from webapp.traces.store import store_batch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_ingest import make_records  # noqa: E402  (the benchmark's mix, 1,000 connections)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]
TABLE = Connection._meta.db_table
UUID7 = r.connection_uuid(HOST, "boot-bench", 7)  # every_kind's accepted connection
UUID8 = r.connection_uuid(HOST, "boot-bench", 8)  # every_kind's connecting one


@pytest.fixture(autouse=True)
def _postgres_only() -> Iterator[None]:
    if connection.vendor != "postgresql":
        pytest.skip("the side connection is PostgreSQL's (run with -m postgres and DATABASE_URL)")
    lifecycle.forget_rows()  # another test's rows: stale here (they would be read again)
    yield
    pgbulk.close_side()
    lifecycle.forget_rows()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """For each read of Connection rows: whether it went to the side connection."""
    seen: list[bool] = []
    load = pgbulk.load

    def spy(*args: Any, **kwargs: Any) -> list[Any]:
        seen.append(kwargs.get("side") is not None)
        return load(*args, **kwargs)

    monkeypatch.setattr(pgbulk, "load", spy)
    return seen


def other_session(sql: str) -> None:
    """Another transaction, committed at once."""
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
        other.execute(sql)


def meanwhile(monkeypatch: pytest.MonkeyPatch, action: Callable[[], None]) -> list[list[tuple[str, str]]]:
    """Run `action` between the overlapped read and the fold (once); returns the keys folded again."""
    fold, again = lifecycle.Fold.fold, lifecycle.Fold._fold_again
    done: list[bool] = []
    folded_again: list[list[tuple[str, str]]] = []

    def racing_fold(self: lifecycle.Fold) -> None:
        if not done:
            done.append(True)
            action()
        fold(self)

    def spy(self: lifecycle.Fold, raced: list[tuple[str, str]]) -> None:
        folded_again.append(sorted(raced))
        again(self, raced)

    monkeypatch.setattr(lifecycle.Fold, "fold", racing_fold)
    monkeypatch.setattr(lifecycle.Fold, "_fold_again", spy)
    return folded_again


def later(start: int) -> list[Any]:
    """A second batch for every_kind's connections 7 and 8 (no alert: every_kind's is counted once)."""
    batch = every_kind(start)
    return [rec for rec in batch if not isinstance(rec, r.Alert)]


def test_the_rows_are_read_on_the_side_connection_while_the_copy_runs_and_fold_as_the_whole_records(
    reads: list[bool],
) -> None:
    batches = [
        make_records(3000, HOST)[:1500] + every_kind(10_000),
        make_records(3000, HOST)[1500:] + every_kind(20_000),
    ]
    for batch in batches:
        result, whole = store_entry(as_read(batch))
        assert (whole, result.stored, result.duplicates) == (None, len(batch), 0)
    # The first batch's rows read on the side; the second's connections are the first's:
    # the rows as it wrote them (remembered), nothing read.
    assert reads == [True]
    from_views = stored()
    empty()
    for batch in batches:
        store_batch(batch)
    assert stored() == from_views


def test_a_row_another_transaction_updates_after_the_overlapped_read_is_read_again_and_folded_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    concurrent = (
        f"UPDATE {TABLE} SET retransmits = retransmits + 5, resets = resets + 1, last_seen = 50.0, "
        f"comm = 'other', srtt_us = 7 WHERE conn_uuid = '{UUID7}'"
    )
    store_entry(as_read(every_kind(1)))
    folded_again = meanwhile(monkeypatch, lambda: other_session(concurrent))
    result, whole = store_entry(as_read(later(100)))
    assert whole is None and result.duplicates == 0
    assert folded_again == [[(HOST, UUID7)]]  # its version changed since the read: folded again
    raced = stored()
    monkeypatch.undo()
    # The same, one after the other: the other transaction's change, then the batch.
    empty()
    store_entry(as_read(every_kind(1)))
    other_session(concurrent)
    store_entry(as_read(later(100)))
    assert stored() == raced
    row = Connection.objects.get(conn_uuid=UUID7)
    # every_kind folds 1 retransmit (then the summary's total_retrans=3 as a floor) and 1 reset per batch.
    assert (row.retransmits, row.resets, row.last_seen) == (3 + 5 + 1, 1 + 1 + 1, 50.0)


def test_a_row_another_transaction_deletes_after_the_overlapped_read_is_stored_again_as_new(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store_entry(as_read(every_kind(1)))
    folded_again = meanwhile(monkeypatch, lambda: other_session(f"DELETE FROM {TABLE} WHERE conn_uuid = '{UUID8}'"))
    store_entry(as_read(later(100)))
    assert folded_again == [[(HOST, UUID8)]]
    raced = stored()
    monkeypatch.undo()
    empty()
    store_entry(as_read(every_kind(1)))
    Connection.objects.filter(conn_uuid=UUID8).delete()
    store_entry(as_read(later(100)))
    assert stored() == raced
    assert Connection.objects.get(conn_uuid=UUID8).first_seen == 6.0  # from the second batch only


def test_a_row_changed_by_another_transaction_that_the_batch_does_not_change_is_left_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store_entry(as_read(every_kind(1)))
    # The second batch touches connection 8 only; the other transaction changes 7.
    batch = [rec for rec in later(100) if rec.conn_uuid == UUID8]
    folded_again = meanwhile(
        monkeypatch, lambda: other_session(f"UPDATE {TABLE} SET resets = 9 WHERE conn_uuid = '{UUID7}'")
    )
    store_entry(as_read(batch))
    assert folded_again == []
    assert Connection.objects.get(conn_uuid=UUID7).resets == 9


def test_a_failing_side_connection_falls_back_to_reading_after_the_copy(
    monkeypatch: pytest.MonkeyPatch, reads: list[bool]
) -> None:
    store_entry(as_read(every_kind(1)))
    lifecycle.forget_rows()  # so that the rows are read
    broken = pgbulk.side_connection()
    assert broken is not None
    broken.close()  # e.g. the server ended that session
    monkeypatch.setattr(pgbulk, "side_connection", lambda: broken)
    reads.clear()
    result, whole = store_entry(as_read(later(100)))
    assert (whole, result.stored) == (None, len(later(100)))
    assert reads == [True, False]  # the side read failed, the writer's own connection read
    overlapped = stored()
    monkeypatch.undo()
    empty()
    store_batch(every_kind(1))
    store_batch(later(100))
    assert stored() == overlapped


def test_an_entry_whose_records_do_not_decode_stores_nothing() -> None:
    import msgspec

    fields = as_read(every_kind(1))
    fields[b"body"] = fields[b"body"][:-5]  # the COPY-ready rows are fine, the records are cut short
    with pytest.raises(msgspec.DecodeError):
        store_entry(fields)
    assert stored() == ([], [])


def test_the_side_connection_follows_djangos() -> None:
    side = pgbulk.side_connection()
    assert side is not None and pgbulk.side_connection() is side  # kept between batches
    connection.close()
    gc.collect()
    assert side.closed  # so that the test database can be dropped
    again = pgbulk.side_connection()
    assert again is not None and again is not side and not again.closed


def test_a_row_another_transaction_changes_that_the_batch_left_as_read_is_folded_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store_entry(as_read(every_kind(1)))
    # The second batch repeats connection 8's records (new seqs): nothing changes on the
    # row read; but the other transaction set its RTT, which the batch's sample sets back.
    batch = [rec for rec in later(100) if rec.conn_uuid == UUID8]
    concurrent = f"UPDATE {TABLE} SET srtt_us = 7 WHERE conn_uuid = '{UUID8}'"
    folded_again = meanwhile(monkeypatch, lambda: other_session(concurrent))
    store_entry(as_read(batch))
    assert folded_again == [[(HOST, UUID8)]]
    assert Connection.objects.get(conn_uuid=UUID8).srtt_us == 900  # as if the batch came after


def test_a_batch_of_one_kind_runs_both_steps_the_second_after_its_only_copy() -> None:
    batch = [rec for rec in every_kind(1) if isinstance(rec, r.TcpStateChange)]
    result, whole = store_entry(as_read(batch))
    assert (whole, result.stored) == (None, len(batch))
    overlapped = stored()
    empty()
    store_batch(batch)
    assert stored() == overlapped
    assert ("bench", "records_ingested", "tcp_state", len(batch)) in overlapped[1]


def test_a_remembered_row_another_transaction_changed_between_batches_is_read_again_and_folded_again(
    monkeypatch: pytest.MonkeyPatch, reads: list[bool]
) -> None:
    store_entry(as_read(every_kind(1)))
    assert {key[1] for key in lifecycle._remembered()} == {UUID7, UUID8}
    concurrent = (
        f"UPDATE {TABLE} SET retransmits = retransmits + 5, srtt_us = 7 WHERE conn_uuid IN ('{UUID7}', '{UUID8}')"
    )
    other_session(concurrent)
    reads.clear()
    folded_again = meanwhile(monkeypatch, lambda: None)
    store_entry(as_read(later(100)))
    assert reads == [False]  # nothing read before the write: the rows were remembered
    assert folded_again == [sorted([(HOST, UUID7), (HOST, UUID8)])]
    raced = stored()
    monkeypatch.undo()
    empty()
    lifecycle.forget_rows()
    store_batch(every_kind(1))
    other_session(concurrent)
    store_batch(later(100))
    assert stored() == raced


def test_a_batch_rolled_back_leaves_the_remembered_rows_as_committed(monkeypatch: pytest.MonkeyPatch) -> None:
    from webapp.traces import store

    store_entry(as_read(every_kind(1)))
    committed = dict(lifecycle._remembered())

    def failing(records: Any) -> Callable[[], None]:
        def write() -> None:
            raise RuntimeError("a write that fails after the Connection rows were written")

        return write

    monkeypatch.setattr(store, "STORE_HOOKS", [*store.STORE_HOOKS, failing])
    with pytest.raises(RuntimeError):
        store_entry(as_read(later(100)))
    assert lifecycle._remembered() == committed
    monkeypatch.undo()
    store_entry(as_read(later(100)))
    overlapped = stored()
    empty()
    lifecycle.forget_rows()
    store_batch(every_kind(1))
    store_batch(later(100))
    assert stored() == overlapped

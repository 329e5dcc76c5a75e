"""The collector's HTTP sink against a real local HTTP server that fails, stalls and restarts."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import msgspec
import pytest
from ingest_stub import TOKEN, IngestStub, make_records

from collector.sinks.http import MAX_RECORD_REFUSALS, HttpSink


def sink_for(url: str, spool: Path, **kw: object) -> HttpSink:
    options: dict[str, object] = {
        "batch_size": 50,
        "flush_interval": 0.02,
        "timeout": 2.0,
        "retry_interval": 0.02,
        "max_retry_interval": 0.1,
    }
    options.update(kw)
    return HttpSink(url, TOKEN, spool, **options)  # type: ignore[arg-type]


def wait_for(condition: object, what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_every_record_arrives_exactly_once_in_order_across_a_server_restart(stub: IngestStub, tmp_path: Path) -> None:
    sink = sink_for(stub.url, tmp_path / "spool")
    seq = 0
    for step in range(90):
        sink.write(make_records(seq, 37))
        seq += 37
        if step == 30:
            stub.stop()  # mid-stream: the sender may be between batches or in a request
        if step == 60:
            wait_for(lambda: sink.spooled, "the sink to spool")
            stub.start()  # same port
        time.sleep(0.002)
    sink.close()
    assert stub.received == list(range(seq))
    assert sink.stats.spooled_batches > 0
    assert sink.stats.replayed_batches == sink.stats.spooled_batches
    assert sink.spool.segments() == []


def test_the_spool_is_replayed_by_the_next_collector_after_a_restart(stub: IngestStub, tmp_path: Path) -> None:
    stub.stop()
    first = sink_for(stub.url, tmp_path / "spool")
    first.write(make_records(0, 120))
    first.close(timeout=0.1)
    assert first.stats.sent_batches == 0
    assert first.stats.spooled_batches == 3
    stub.start()
    second = sink_for(stub.url, tmp_path / "spool")
    second.write(make_records(120, 30))
    second.close()
    assert stub.received == list(range(150))
    assert second.stats.replayed_batches == 3  # replayed on start, before the new batch


@pytest.mark.parametrize("status", [500, 503, 429])
def test_a_retryable_answer_spools_the_batch_and_replays_it_in_order(
    stub: IngestStub, tmp_path: Path, status: int
) -> None:
    stub.fail_status, stub.fail_next = status, 3
    sink = sink_for(stub.url, tmp_path / "spool")
    for start in range(0, 500, 25):
        sink.write(make_records(start, 25))
    sink.close()
    assert stub.received == list(range(500))
    assert stub.requests == sink.stats.sent_batches + 3
    assert sink.stats.spooled_batches >= 1


def test_a_server_too_slow_to_answer_gets_the_batch_again_and_stores_it_once(stub: IngestStub, tmp_path: Path) -> None:
    stub.slow = 0.6
    sink = sink_for(stub.url, tmp_path / "spool", timeout=0.2)
    sink.write(make_records(0, 50))
    wait_for(lambda: sink.spooled, "the timed-out batch to be spooled")
    stub.slow = 0.0
    sink.write(make_records(50, 50))
    sink.close()
    assert stub.stored == list(range(100))
    assert stub.received.count(0) == 2  # stored by the slow answer, then replayed: a duplicate
    assert sink.stats.duplicates == 50


def test_a_413_splits_the_batch_until_it_fits(stub: IngestStub, tmp_path: Path) -> None:
    stub.max_records = 10
    sink = sink_for(stub.url, tmp_path / "spool", batch_size=64)
    sink.write(make_records(0, 200))
    sink.close()
    assert stub.received == list(range(200))
    assert sink.stats.split_batches > 0
    assert sink.stats.spooled_batches == 0


def test_a_400_naming_one_record_rejects_that_record_alone_and_sends_the_rest(
    stub: IngestStub, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stub.reject_seq = 7
    sink = sink_for(stub.url, tmp_path / "spool", batch_size=5)
    with caplog.at_level(logging.INFO, "nettrail.sink.http"):
        for start in range(0, 20, 5):
            sink.write(make_records(start, 5))
            sink.flush()
        sink.close()
    assert stub.stored == [s for s in range(20) if s != 7]
    [kept] = list((tmp_path / "spool" / "rejected").glob("*.msgpack"))
    assert [r["seq"] for r in msgspec.msgpack.decode(kept.read_bytes())] == [7]
    assert "record 2: seq: refused by the stub" in kept.with_suffix(".error").read_text()
    assert "rejected a batch of 1 records with 400: record 2: seq: refused by the stub" in caplog.text
    assert TOKEN not in caplog.text
    assert (sink.stats.rejected_records, sink.stats.refused_single_records, sink.refused_records) == (1, 1, 1)


def test_a_refused_record_replayed_from_the_spool_is_counted_once(stub: IngestStub, tmp_path: Path) -> None:
    """The server refuses seq 7, then fails (500) the rest of its batch: the whole batch is
    spooled and replayed, the server refuses seq 7 again, and it is still one refused record."""
    stub.reject_seq = 7
    stub.fail_after_reject = 1  # the next request (the rest of the batch) answers 500 once
    sink = sink_for(stub.url, tmp_path / "spool", batch_size=5)
    for start in range(0, 20, 5):
        sink.write(make_records(start, 5))
        sink.flush()
    sink.close()
    assert sorted(set(stub.stored)) == [s for s in range(20) if s != 7]
    assert sink.stats.spooled_batches >= 1
    assert stub.refused == 2  # seq 7 refused before and after the replay
    assert len(list((tmp_path / "spool" / "rejected").glob("*.msgpack"))) == 1
    assert (sink.stats.rejected_records, sink.refused_records, sink.lost_records) == (1, 1, 0)


def test_a_batch_of_bad_records_is_refused_whole_after_a_bounded_number_of_requests(
    stub: IngestStub, tmp_path: Path
) -> None:
    stub.reject_all_from = 100  # every record from seq 100 on is refused, one at a time
    sink = sink_for(stub.url, tmp_path / "spool", batch_size=200)
    sink.write(make_records(0, 200))
    sink.close()
    # the good records (before the first bad one, which the server names) are all stored;
    # one request per refused record, then the untried rest is rejected whole
    assert stub.stored == list(range(100))
    assert stub.requests == MAX_RECORD_REFUSALS + 1
    kept = sorted((tmp_path / "spool" / "rejected").glob("*.msgpack"))
    assert [len(msgspec.msgpack.decode(p.read_bytes())) for p in kept] == [1] * MAX_RECORD_REFUSALS + [
        100 - MAX_RECORD_REFUSALS
    ]
    assert "refused one by one" in kept[-1].with_suffix(".error").read_text()
    assert (sink.refused_records, sink.stats.refused_single_records) == (100, MAX_RECORD_REFUSALS)


def test_a_wrong_token_is_rejected_not_spooled_forever(stub: IngestStub, tmp_path: Path) -> None:
    sink = HttpSink(stub.url, "not-the-token", tmp_path / "spool", batch_size=10, flush_interval=0.02)
    sink.write(make_records(0, 10))
    sink.close()
    assert stub.received == []
    assert sink.stats.rejected_batches == 1
    assert "401 bad ingest token" in next((tmp_path / "spool" / "rejected").glob("*.error")).read_text()


def test_a_full_spool_drops_the_oldest_batches_and_counts_them(stub: IngestStub, tmp_path: Path) -> None:
    stub.stop()
    sink = sink_for(stub.url, tmp_path / "spool", max_spool_bytes=16384, batch_size=10)
    for start in range(0, 500, 10):
        sink.write(make_records(start, 10))
    sink.close(timeout=0)
    on_disk = sum(p.stat().st_size for p in (tmp_path / "spool").glob("*.seg"))
    assert 0 < on_disk <= 16384
    stub.start()
    after = sink_for(stub.url, tmp_path / "spool")
    after.close()
    assert sink.lost_records > 0
    assert stub.received == list(range(sink.lost_records, 500))


def test_write_returns_at_once_while_the_server_stalls(stub: IngestStub, tmp_path: Path) -> None:
    stub.slow = 0.5
    sink = sink_for(stub.url, tmp_path / "spool", batch_size=10, timeout=2.0)
    sink.write(make_records(0, 10))
    wait_for(lambda: stub.requests == 1, "the first request")
    for start in range(10, 110, 10):
        sink.write(make_records(start, 10))  # would take 5 s if write waited for the network
    assert sink._handled < sink._accepted  # the sender is still stuck in the first request
    stub.slow = 0.0
    sink.close()
    assert stub.received == list(range(110))


def test_records_held_up_by_a_slow_request_overflow_to_the_spool_in_order(stub: IngestStub, tmp_path: Path) -> None:
    stub.slow = 0.5
    sink = sink_for(stub.url, tmp_path / "spool", batch_size=10, max_pending=30, timeout=2.0)
    sink.write(make_records(0, 10))
    wait_for(lambda: stub.requests == 1, "the first request")
    for start in range(10, 200, 10):
        sink.write(make_records(start, 10))
    assert len(sink._pending) <= 30  # the rest went to disk, not memory
    assert sink.spooled
    stub.slow = 0.0
    sink.close()
    assert stub.received == list(range(200))
    assert sink.stats.spooled_batches >= 16


def test_rejected_batches_stay_within_the_spool_bound_and_each_refused_record_counts_once(
    stub: IngestStub, tmp_path: Path
) -> None:
    sink = HttpSink(
        stub.url, "revoked-token", tmp_path / "spool", max_spool_bytes=8192, batch_size=10, flush_interval=0.02
    )
    for start in range(0, 300, 10):
        sink.write(make_records(start, 10))
        sink.flush()
    sink.close()
    kept = sorted((tmp_path / "spool" / "rejected").glob("*.msgpack"))
    assert sum(p.stat().st_size for p in kept) <= 8192
    assert sink.stats.rejected_records == 300
    first_kept = msgspec.msgpack.decode(kept[0].read_bytes())[0]["seq"]
    assert sink.stats.rejected_dropped_records == first_kept > 0
    # Refused, kept or deleted since: each of the 300 counted once, none as a spool loss.
    assert (sink.refused_records, sink.lost_records) == (300, 0)
    assert [msgspec.msgpack.decode(p.read_bytes())[-1]["seq"] for p in kept][-1] == 299

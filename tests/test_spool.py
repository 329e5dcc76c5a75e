"""The collector's on-disk spool: order, durability across reopen, damaged tails, size bound."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from collector.spool import HEADER, Spool


def drain(spool: Spool) -> list[bytes]:
    out = []
    while (entry := spool.peek()) is not None:
        out.append(entry.payload)
        spool.ack(entry)
    return out


def payload(i: int, size: int = 40) -> bytes:
    return f"batch-{i:05d}-".encode().ljust(size, b".")


def test_batches_come_back_oldest_first_and_survive_a_reopen(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    for i in range(30):
        spool.append(payload(i), 3)
    first = spool.peek()
    assert first is not None and first.payload == payload(0) and first.records == 3
    spool.ack(first)
    reopened = Spool(tmp_path, max_bytes=1 << 20)
    assert drain(reopened) == [payload(i) for i in range(1, 30)]
    assert reopened.empty()
    assert reopened.segments() == []


def test_appends_after_a_reopen_come_after_the_old_batches(tmp_path: Path) -> None:
    Spool(tmp_path, max_bytes=1 << 20).append(payload(0), 1)
    again = Spool(tmp_path, max_bytes=1 << 20)
    again.append(payload(1), 1)
    assert len(again.segments()) == 2
    assert drain(again) == [payload(0), payload(1)]


def test_a_truncated_segment_tail_is_detected_and_the_intact_batches_are_replayed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    for i in range(5):
        spool.append(payload(i), 1)
    [segment] = list(tmp_path.glob("*.seg"))
    segment.write_bytes(segment.read_bytes()[:-7])  # a crash in the middle of the last append
    reopened = Spool(tmp_path, max_bytes=1 << 20)
    reopened.append(payload(99), 1)
    with caplog.at_level(logging.ERROR, "nettrail.spool"):
        assert drain(reopened) == [payload(i) for i in range(4)] + [payload(99)]
    assert reopened.corrupt_segments == 1
    assert "truncated entry" in caplog.text


def test_a_checksum_mismatch_skips_the_rest_of_that_segment_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = Spool(tmp_path, max_bytes=8192)  # 1 KiB segments: 40-byte batches, 18 per segment
    for i in range(30):
        spool.append(payload(i), 1)
    first, second = sorted(tmp_path.glob("*.seg"))
    data = bytearray(first.read_bytes())
    entry = HEADER.size + 40
    data[2 * entry + HEADER.size + 3] ^= 0xFF  # flip one payload byte of the third batch
    first.write_bytes(bytes(data))
    per_segment = len(data) // entry
    with caplog.at_level(logging.ERROR, "nettrail.spool"):
        got = drain(Spool(tmp_path, max_bytes=8192))
    assert got == [payload(0), payload(1)] + [payload(i) for i in range(per_segment, 30)]
    assert "checksum mismatch" in caplog.text


def test_the_size_bound_holds_and_dropped_batches_are_counted_as_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = Spool(tmp_path, max_bytes=8192)
    with caplog.at_level(logging.ERROR, "nettrail.spool"):
        for i in range(120):
            spool.append(payload(i, 100), 10)
            on_disk = sum(p.stat().st_size for p in tmp_path.glob("*.seg"))
            assert on_disk <= 8192
            assert on_disk == spool.total_bytes
    kept = drain(spool)
    assert kept == [payload(i, 100) for i in range(120 - len(kept), 120)]
    assert spool.lost_batches == 120 - len(kept)
    assert spool.lost_records == 10 * (120 - len(kept))
    assert len(kept) >= 8192 * 3 // 4 // (HEADER.size + 100)  # only whole old segments are dropped
    assert "spool full" in caplog.text


def test_a_batch_larger_than_the_whole_spool_is_refused(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=4096)
    try:
        spool.append(b"x" * 5000, 1)
    except Exception as exc:
        assert "larger than the whole spool" in str(exc)
    else:
        raise AssertionError("append of an oversized batch succeeded")


def test_an_ack_for_a_batch_whose_segment_was_evicted_meanwhile_is_harmless(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=4096)  # 1 KiB segments
    spool.append(payload(0, 500), 1)
    in_flight = spool.peek()
    assert in_flight is not None
    for i in range(1, 12):
        spool.append(payload(i, 500), 1)  # the writer fills the spool and evicts segment 1
    assert in_flight.segment not in spool.segments()
    spool.ack(in_flight)
    assert drain(spool)[-1] == payload(11, 500)


def test_a_drained_spool_reopened_still_replays_what_is_appended_next(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    for i in range(3):
        spool.append(payload(i), 1)
    assert drain(spool) == [payload(i) for i in range(3)]
    reopened = Spool(tmp_path, max_bytes=1 << 20)  # the cursor names a deleted segment
    reopened.append(payload(3), 1)
    assert drain(reopened) == [payload(3)]
    third = Spool(tmp_path, max_bytes=1 << 20)
    third.append(payload(4), 1)
    assert drain(Spool(tmp_path, max_bytes=1 << 20)) == [payload(4)]

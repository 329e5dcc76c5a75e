"""A collector killed outright (SIGKILL) with records in its HTTP sink's memory: the next
sink on the same spool sends the batch that was in flight again and counts the pending
records as lost, so that stored + lost = written (collector/sinks/held.py)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import msgspec
import pytest
from ingest_stub import TOKEN, IngestStub, make_records

from analysis.alerts.config import config_from_mapping
from analysis.alerts.live import Alerting, Extras
from collector.sinks import held
from collector.sinks.http import HttpSink
from translators.kernel import KernelEnv
from translators.records import Alert

ROOT = Path(__file__).resolve().parent.parent
IN_FLIGHT, PENDING, AFTER = 50, 120, 10

# A collector's sink: one batch posted (the server stalls on it), then records written
# while that request is out, so they are pending; then it waits to be killed.
CHILD = textwrap.dedent(
    """
    import sys, time
    sys.path[:0] = [{root!r}, {tests!r}]
    from ingest_stub import TOKEN, make_records
    from collector.sinks.http import HttpSink
    sink = HttpSink({url!r}, TOKEN, {spool!r}, batch_size={in_flight}, flush_interval=0.01, timeout=60)
    sink.write(make_records(0, {in_flight}))
    while sink._in_flight == 0:
        time.sleep(0.005)
    sink.write(make_records({in_flight}, {pending}))
    print("held", flush=True)
    time.sleep(120)
    """
)


def kill_while_holding(stub: IngestStub, spool: Path) -> None:
    """Run CHILD until it holds its records, then SIGKILL it (by PID)."""
    code = CHILD.format(
        root=str(ROOT), tests=str(ROOT / "tests"), url=stub.url, spool=str(spool), in_flight=IN_FLIGHT, pending=PENDING
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "held"
        deadline = time.monotonic() + 10  # counted in flight just before its post goes out
        while stub.requests == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert stub.requests == 1  # the batch in flight reached the server, which stalls on it
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL


@pytest.mark.parametrize("stored_anyway", [True, False], ids=["server-stored-the-batch", "batch-never-stored"])
def test_a_killed_sinks_pending_records_are_counted_and_its_batch_in_flight_is_sent_again(
    stub: IngestStub, tmp_path: Path, stored_anyway: bool, caplog: pytest.LogCaptureFixture
) -> None:
    spool = tmp_path / "spool"
    stub.stall, stub.drop_stalled = 1.0, not stored_anyway
    kill_while_holding(stub, spool)
    time.sleep(1.2)  # the stalled request ends: stored (its answer going nowhere) or dropped
    assert stub.stored == (list(range(IN_FLIGHT)) if stored_anyway else [])
    stub.stall = 0.0
    with caplog.at_level(logging.ERROR, logger="nettrail.sink.http"):
        sink = HttpSink(stub.url, TOKEN, spool, batch_size=IN_FLIGHT, flush_interval=0.01, retry_interval=0.02)
    assert f"holding {IN_FLIGHT + PENDING} records in memory: {PENDING} lost, {IN_FLIGHT} spooled again" in caplog.text
    written = IN_FLIGHT + PENDING + AFTER
    killed = sink.take_killed()
    assert (killed, sink.take_killed()) == (PENDING, 0)  # once
    sink.write(make_records(IN_FLIGHT + PENDING, AFTER))  # the write that holds the loss report (Extras)
    sink.close()
    assert sorted(stub.stored) == [*range(IN_FLIGHT), *range(IN_FLIGHT + PENDING, written)]
    assert len(stub.stored) + killed == written  # stored + lost = written, exactly
    assert sink.stats.duplicates == (IN_FLIGHT if stored_anyway else 0)
    assert sink.stats.replayed_batches == 1
    assert list(spool.glob("held-*")) == []  # closed cleanly, its report sent: nothing left to claim


def test_a_clean_close_leaves_nothing_to_claim(stub: IngestStub, tmp_path: Path) -> None:
    first = HttpSink(stub.url, TOKEN, tmp_path / "spool", batch_size=10, flush_interval=0.01)
    first.write(make_records(0, 25))
    first.close()
    second = HttpSink(stub.url, TOKEN, tmp_path / "spool", batch_size=10, flush_interval=0.01)
    second.close()
    assert second.take_killed() == 0
    assert stub.stored == list(range(25))


def test_a_running_sinks_ledger_is_not_claimed(stub: IngestStub, tmp_path: Path) -> None:
    stub.stall = 1.0
    first = HttpSink(stub.url, TOKEN, tmp_path / "spool", batch_size=10, flush_interval=0.01, timeout=5)
    first.write(make_records(0, 10))
    first.write(make_records(10, 5))  # pending while the first batch stalls
    second = HttpSink(stub.url, TOKEN, tmp_path / "spool", batch_size=10, flush_interval=0.01, timeout=5)
    assert second.take_killed() == 0  # its process is alive: nothing was lost
    stub.stall = 0.0
    first.close()
    second.close()
    assert sorted(stub.stored) == list(range(15))


def test_a_torn_batch_in_flight_counts_as_lost(tmp_path: Path, stub: IngestStub) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    # a ledger whose process is gone (pid 0 never names a user process) and whose batch's
    # bytes were cut short
    (spool / "held-dead.ledger").write_bytes(held.LEDGER.pack(held.MAGIC, 0, 1, 7, 3, 0, 0))
    (spool / "held-dead.inflight").write_bytes(b"\x93\xa1")
    sink = HttpSink(stub.url, TOKEN, spool, batch_size=10, flush_interval=0.01)
    sink.close()
    assert sink.take_killed() == 10
    assert stub.requests == 0


def test_a_chunk_killed_inside_its_spooling_is_spooled_again_not_counted_lost(tmp_path: Path, stub: IngestStub) -> None:
    """write()'s overflow (a slow request holds the sender) spools a chunk with an fsync; a
    kill inside it left the chunk neither surely spooled nor lost: held in its own slot, it
    is spooled again (stored once) and only the pending records count as lost."""
    spool = tmp_path / "spool"
    spool.mkdir()
    chunk = msgspec.msgpack.encode(make_records(0, 10))
    (spool / "held-dead.ledger").write_bytes(held.LEDGER.pack(held.MAGIC, 0, 1, 5, 0, 10, 0))
    (spool / "held-dead.overflow").write_bytes(chunk)
    sink = HttpSink(stub.url, TOKEN, spool, batch_size=10, flush_interval=0.01)
    sink.close()
    assert sink.take_killed() == 5
    assert stub.stored == list(range(10))


def test_the_killed_records_become_one_loss_report(tmp_path: Path, stub: IngestStub) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "held-dead.ledger").write_bytes(held.LEDGER.pack(held.MAGIC, 0, 1, 42, 0, 0, 0))
    sink = HttpSink(stub.url, TOKEN, spool, batch_size=10, flush_interval=0.01)

    class Numbered:
        seq = 1

        def number(self, records: list) -> list:  # type: ignore[type-arg]
            for r in records:
                r.seq, self.seq = self.seq, self.seq + 1
            return records

    env = KernelEnv(host_id="killtest", boot_id="b" * 16, wall_offset=0.0)
    try:
        out = Extras(Numbered(), env, sink, None).add([])
        again = Extras(Numbered(), env, sink, None).add([])  # the next session's (a swap): not again
    finally:
        sink.close()
    assert again == []
    assert [(r.kind, r.probe, r.hook, r.event_type, r.lost, r.lost_total) for r in out] == [
        ("loss_report", "loss", "sink/killed", "killed", 42, 42)
    ]
    written: list = []  # type: ignore[type-arg]

    class ListSink:
        def write(self, records: list) -> None:  # type: ignore[type-arg]
            written.extend(records)

    Alerting(config_from_mapping({})).stream(iter([out]), ListSink())
    h1 = [a for a in written if isinstance(a, Alert) and a.rule_id == "H1"]
    assert len(h1) == 1 and h1[0].evidence == [out[0].seq]
    assert "was killed (SIGKILL) holding 42 records in memory (unsent, or unread in its kernel ring), lost" in (
        h1[0].message
    )


# A second collector on the spool: it claims the first one's ledger, then is killed too
# before anything of it was sent (before its Extras could report the count).
CLAIMER = textwrap.dedent(
    """
    import sys, time
    sys.path[:0] = [{root!r}, {tests!r}]
    from ingest_stub import TOKEN
    from collector.sinks.http import HttpSink
    sink = HttpSink({url!r}, TOKEN, {spool!r}, batch_size=10, flush_interval=0.01, timeout=60)
    print("claimed", sink.killed_records, flush=True)
    time.sleep(120)
    """
)


def test_a_sink_killed_before_it_reported_the_count_it_claimed_hands_it_on(stub: IngestStub, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    stub.stall, stub.drop_stalled = 1.0, True
    kill_while_holding(stub, spool)  # IN_FLIGHT posted and never stored, PENDING in memory
    time.sleep(1.2)
    stub.stall = 0.0
    code = CLAIMER.format(root=str(ROOT), tests=str(ROOT / "tests"), url=stub.url, spool=str(spool))
    second = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert second.stdout is not None
        assert second.stdout.readline().split() == ["claimed", str(PENDING)]
    finally:
        os.kill(second.pid, signal.SIGKILL)
        second.wait(timeout=10)
    third = HttpSink(stub.url, TOKEN, spool, batch_size=IN_FLIGHT, flush_interval=0.01, retry_interval=0.02)
    killed = third.take_killed()
    third.write(make_records(IN_FLIGHT + PENDING, AFTER))
    third.close()
    # the first collector's pending records, counted once, by the third; its batch in flight
    # (spooled again by the second, which may have sent it before it was killed) stored once
    assert killed == PENDING
    assert sorted(set(stub.stored)) == [*range(IN_FLIGHT), *range(IN_FLIGHT + PENDING, IN_FLIGHT + PENDING + AFTER)]
    assert len(set(stub.stored)) + killed == IN_FLIGHT + PENDING + AFTER
    assert list(spool.glob("held-*")) == []


def test_a_sink_closed_before_anything_took_the_count_leaves_it_to_the_next(tmp_path: Path, stub: IngestStub) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "held-dead.ledger").write_bytes(held.LEDGER.pack(held.MAGIC, 0, 1, 42, 0, 0, 0))
    first = HttpSink(stub.url, TOKEN, spool, batch_size=10, flush_interval=0.01)
    first.close()  # nobody asked for the count (no Extras): it is not dropped with the sink
    [kept] = spool.glob("held-*")
    assert kept.suffix == ".ledger"
    raw = kept.read_bytes()
    assert held.LEDGER.unpack_from(raw)[-1] == 42
    # the next sink claims it once this process is gone (here: a ledger of a dead process)
    kept.write_bytes(held.LEDGER.pack(held.MAGIC, 0, 1, *held.LEDGER.unpack_from(raw)[3:]))
    second = HttpSink(stub.url, TOKEN, spool, batch_size=10, flush_interval=0.01)
    assert second.take_killed() == 42
    second.write(make_records(0, 1))  # its report
    second.close()
    assert list(spool.glob("held-*")) == [] and stub.stored == [0]


def test_a_ledger_from_before_the_carried_count_is_still_read(tmp_path: Path, stub: IngestStub) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "held-old.ledger").write_bytes(held.LEDGER_V1.pack(held.MAGIC_V1, 0, 1, 9, 0, 0))
    sink = HttpSink(stub.url, TOKEN, spool, batch_size=10, flush_interval=0.01)
    assert sink.take_killed() == 9
    sink.write(make_records(0, 1))
    sink.close()

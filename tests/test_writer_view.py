"""The scale-out writer stores an all-new batch from its records' views (webapp/traces/view.py):
the Connection rows and the metric counters come out exactly as from the whole records.

PostgreSQL only (`-m postgres` with DATABASE_URL): the views go with COPY-ready rows.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from translators import records as r
from webapp.bus import streams
from webapp.bus.writer import store_entry
from webapp.metrics.models import IngestCounter
from webapp.traces import view
from webapp.traces.models import KIND_MODELS, Connection
from webapp.traces.store import store_batch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_ingest import make_records  # noqa: E402  (the benchmark's mix, 1,000 connections)

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
HOST = "bench"


@pytest.fixture(autouse=True)
def _postgres_only() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("views go with COPY-ready rows, PostgreSQL's (run with -m postgres and DATABASE_URL)")


def env(seq: int, ts: float, conn: int, **kw: Any) -> dict[str, Any]:
    return {"host_id": HOST, "boot_id": "boot-bench", "seq": seq, "ts_ns": int(ts * 1e9), "ts_wall": ts,
            "conn_uuid": r.connection_uuid(HOST, "boot-bench", conn), **kw}  # fmt: skip


def every_kind(start: int) -> list[Any]:
    """Each tracked and counted kind, in orders that matter: softirq then task attribution,
    an accepted connection's counters before and after its `active`, a late older state,
    a kernel summary, an alert in two versions, a reset; plus untracked kinds."""
    flow = {"ip_ver": 4, "src": "10.0.0.1", "sport": 4000, "dst": "10.0.0.9", "dport": 80}
    s = start
    return [
        r.FlowCounters(**env(s, 1.0, 7, **flow), provider="siftr", probe="flow-counters", proto="tcp",
                       bytes_out=10, bytes_in=900, ctx="softirq", pid=1, comm="swapper"),
        r.TcpStateChange(**env(s + 1, 2.0, 7, **flow), provider="tcp", probe="state-change", prev_state="LISTEN",
                         state="SYN_RECEIVED", active=False, ctx="task", pid=42, tgid=42, comm="nginx", uid=33),
        r.FlowCounters(**env(s + 2, 3.0, 7, **flow), provider="siftr", probe="flow-counters", proto="tcp",
                       bytes_out=20, bytes_in=950, packets_out=3, packets_in=9),
        r.TcpStateChange(**env(s + 3, 1.5, 7, **flow), provider="tcp", probe="state-change", prev_state="SYN_RECEIVED",
                         state="ESTABLISHED"),  # older than the state above: no roll-back
        r.TcpRetransmit(**env(s + 4, 3.5, 7, **flow), provider="tcp", probe="retransmit", state="ESTABLISHED"),
        r.TcpReset(**env(s + 5, 4.0, 7, **flow), provider="tcp", probe="reset-received", sender="peer"),
        r.Alert(**env(s + 6, 4.1, 7), provider="nettrail", probe="alert", rule_id="K1", severity="warning",
                start=4.1, message="m", alert_id="a-1"),
        r.Alert(**env(s + 7, 4.2, 7), provider="nettrail", probe="alert", rule_id="K1", severity="critical",
                start=4.1, message="m", alert_id="a-1"),
        r.Connection(**env(s + 8, 5.0, 7, **flow), provider="tcp", probe="connection", proto="tcp", source="kernel",
                     start=0.5, end=5.0, bytes_acked=21, bytes_received=951, total_retrans=3, state="CLOSED",
                     conn_state="SF", history="ShADFf"),
        r.TcpStateChange(**env(s + 9, 6.0, 8), provider="tcp", probe="state-change", prev_state="CLOSED",
                         state="SYN_SENT", ip_ver=4, src="0.0.0.0", sport=0, dst="10.0.0.9", dport=443),
        r.SiftrSample(**env(s + 10, 6.5, 8, **flow), provider="siftr", probe="siftr", direction="out", srtt=900,
                      snd_cwnd=10),
        r.SkbDrop(**env(s + 11, 7.0, 8), provider="skb", probe="m-free", drop_reason=2, drop_reason_str="NO_SOCKET"),
        r.DropCount(host_id=HOST, boot_id="boot-bench", seq=s + 12, ts_ns=1, ts_wall=7.5, provider="skb",
                    probe="drop-count", drop_reason_str="TCP_CSUM", count=30, delta=10),
        r.LossReport(host_id=HOST, boot_id="boot-bench", seq=s + 13, ts_ns=2, ts_wall=7.6, provider="nettrail",
                     probe="loss", event_type="ringbuf", lost=5, lost_total=5, received_total=100),
    ]  # fmt: skip


def stored() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    fields = [f.name for f in Connection._meta.concrete_fields if f.name != "id"]
    conns = sorted(Connection.objects.values_list(*fields))
    counters = sorted(IngestCounter.objects.values_list("host", "metric", "label", "value"))
    return conns, counters


def empty() -> None:
    for model in [*KIND_MODELS.values(), Connection, IngestCounter]:
        model.objects.all().delete()


def as_read(records: list[Any]) -> dict[bytes, Any]:
    return {key.encode(): value for key, value in streams.entry_fields(HOST, records, copy_ready=True).items()}


def test_views_fold_and_count_exactly_as_the_whole_records() -> None:
    batches = [
        make_records(3000, HOST)[:1500] + every_kind(10_000),
        make_records(3000, HOST)[1500:] + every_kind(20_000),
    ]
    for batch in batches:
        result, whole = store_entry(as_read(batch))
        assert (whole, result.stored, result.duplicates) == (None, len(batch), 0)  # the views' path was taken
        assert {type(rec) for rec in result.new} <= set(view.VIEWS.values())
    from_views = stored()
    empty()
    for batch in batches:
        store_batch(batch)
    assert stored() == from_views
    conns, counters = from_views
    # The bench's connection c has only kind c % 10: 600 of 1,000 are of tracked kinds;
    # every_kind's connection 7 is the bench's connection 6 (skb events only): one more.
    assert len(conns) == 601
    assert {("bench", "drops", "TCP_CSUM", 20), ("bench", "tcp_resets", "peer", 2)} <= set(counters)
    assert ("bench", "collector_lost_events", "ringbuf", 10) in counters


def test_a_redelivered_entry_is_stored_from_its_whole_records_and_counts_duplicates() -> None:
    batch = every_kind(1)
    assert store_entry(as_read(batch))[1] is None
    result, whole = store_entry(as_read(batch + every_kind(100)))
    assert whole is not None and [type(rec) for rec in whole] == [type(rec) for rec in batch] * 2
    assert (result.stored, result.duplicates) == (len(batch), len(batch))
    assert Connection.objects.get(conn_uuid=r.connection_uuid(HOST, "boot-bench", 7)).alerts == 1

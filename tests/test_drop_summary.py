"""The buffers page's drop counts kept at ingest (webapp/traces/drop_summary.py) give the
page the answers the GROUP BYs over every skb_drop row gave (buffers.summary(from_rows=
True)), after ingest, a resent batch, retention by rows and by age (PostgreSQL: a day
partition dropped), and the migration's recount. Exact values; SQLite, and PostgreSQL
with `-m postgres` and DATABASE_URL."""

from __future__ import annotations

import time
from typing import Any

import pytest

from translators.records import SkbDrop, connection_uuid
from webapp.dashboard import buffers
from webapp.traces import drop_summary, retention
from webapp.traces.models import DropByLocation, DropByProcess, DropBySecond
from webapp.traces.store import store_batch

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
HOSTS = ("web1", "web2")
REASONS = ("NO_SOCKET", "TCP_CSUM", "NETFILTER_DROP")
LOCATIONS = ("tcp_v4_rcv+0x1f4", "unix_release_sock+0x90", None, "nf_hook_slow+0x7c", "unix_stream_read_generic+0x2")
COMMS = ("nginx", None, "curl")


def drop(seq: int, ts: float, host: str | None = None) -> SkbDrop:
    return SkbDrop(
        host_id=host or HOSTS[seq % 2], boot_id="b", seq=seq, ts_ns=seq, ts_wall=ts, provider="skb",
        probe="m-free", skb_uid=seq, drop_reason=2, drop_reason_str=REASONS[seq % 3],
        drop_location=LOCATIONS[seq % 5], len=60, comm=COMMS[seq % 3], tgid=None if seq % 7 == 0 else 100 + seq % 4,
        conn_uuid=connection_uuid("web1", "b", seq % 5),
    )  # fmt: skip


def _canon(answer: dict[str, Any]) -> dict[str, Any]:
    """The answer with each breakdown in one order (ties of a count come in any order)."""
    out = dict(answer)
    for name in ("by_location", "by_process"):
        out[name] = sorted(answer[name], key=lambda r: sorted((k, str(v)) for k, v in r.items()))
    out["timeline"] = _timeline(answer["timeline"])
    return out


def _timeline(timeline: dict[str, Any]) -> dict[str, Any]:
    """Series of equal totals come in the order their drops came: put them in one order."""
    return {**timeline, "series": sorted(timeline["series"], key=str)}


def assert_same_answers() -> None:
    for host in (None, *HOSTS):
        for reason in (None, *REASONS):
            for unix in (False, True):
                kept = _canon(buffers.summary(host, reason, None, unix))
                rows = _canon(buffers.summary(host, reason, None, unix, from_rows=True))
                assert kept == rows, (host, reason, unix)


def _tables() -> list[list[tuple[Any, ...]]]:
    return [
        sorted(m.objects.values_list(*[f.name for f in m._meta.fields if f.name != "id"]))
        for m in (DropByLocation, DropByProcess, DropBySecond)
    ]


def test_the_kept_counts_answer_as_the_row_queries_after_ingest_resend_retention_and_recount() -> None:
    t0 = float(int(time.time()) - 5000)  # whole seconds: the timeline's buckets match exactly
    batch = [drop(i, t0 + i // 3) for i in range(600)]
    store_batch(batch[:400])
    store_batch(batch[200:])  # half resent: stored (and counted) once
    assert DropByLocation.objects.filter(host_id="web1").count() == 15  # 3 reasons x 5 locations
    assert sum(DropBySecond.objects.values_list("n", flat=True)) == 600
    answer = buffers.summary(None, None, None, True)
    assert answer["unix"] == {"included": True, "drops": 240}
    assert sum(r["n"] for r in answer["by_location"]) == 600
    assert {r["drop_location"] for r in answer["by_location"]} == set(LOCATIONS)
    assert {(r["comm"], r["tgid"]) for r in answer["by_process"]} >= {(None, None), ("nginx", 100)}
    assert_same_answers()

    kept = _tables()
    drop_summary.rebuild()  # migration 0035's recount of the stored rows
    assert _tables() == kept

    retention.trim(retention.Policy(days=0, rows=450, batch=64), now=t0 + 1000)  # the oldest rows go
    assert sum(DropBySecond.objects.values_list("n", flat=True)) == 450
    assert_same_answers()
    kept = _tables()
    drop_summary.rebuild()
    assert _tables() == kept


def test_a_drop_a_day_old_leaves_the_counts_with_its_row() -> None:
    now = float(int(time.time()))
    store_batch([drop(i, now - 3 * 86400 + i) for i in range(10)] + [drop(100 + i, now - i) for i in range(20)])
    assert_same_answers()
    retention.trim(retention.Policy(days=1, rows=0, batch=100), now=now)  # PostgreSQL: its partition dropped
    assert sum(DropBySecond.objects.values_list("n", flat=True)) == 20
    assert not DropBySecond.objects.filter(second__lt=now - 86400).exists()  # no row of 0 left behind
    assert_same_answers()


def test_the_timeline_takes_the_newest_drops_in_whole_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    t0 = float(int(time.time()) - 100)
    store_batch([drop(i, t0 + i // 10) for i in range(300)])  # 10 drops a second for 30 s
    monkeypatch.setattr(buffers, "MAX_TIMELINE_DROPS", 100)  # the newest 10 seconds, exactly
    assert _timeline(buffers.summary(None, None, None, True)["timeline"]) == _timeline(
        buffers.summary(None, None, None, True, from_rows=True)["timeline"]
    )
    whole = buffers.summary(None, None, None, True)["timeline"]
    monkeypatch.setattr(buffers, "MAX_TIMELINE_DROPS", 95)  # the 10th second is taken whole
    kept = buffers.summary(None, None, None, True)["timeline"]
    assert sum(sum(s["counts"]) for s in kept["series"]) == 100
    assert kept == whole

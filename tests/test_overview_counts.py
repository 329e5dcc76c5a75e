"""The Overview's grouped counts (dashboard/overview_counts.py) equal a fresh count per
host and kind after ingest, retention and deletion; the Overview shows them; and the
``state TIME_WAIT`` filter's last_seen shortcut keeps exactly the rows it kept before."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db.models import Count, Exists, OuterRef, Q
from django.test import Client

from translators.records import SkbDrop, TcpStateChange, connection_uuid
from webapp.dashboard import overview_counts, queries
from webapp.dashboard.tables import TcpStateChange as StateRow
from webapp.traces import retention
from webapp.traces.models import KIND_MODELS, Connection, Host
from webapp.traces.store import store_batch

pytestmark = pytest.mark.django_db
HOSTS = ("web1", "web2", "idle")


def state(host: str, seq: int, cookie: int, ts: float, new: str, prev: str = "SYN_SENT") -> TcpStateChange:
    return TcpStateChange(
        host_id=host, boot_id="b", seq=seq, ts_ns=seq, ts_wall=ts, provider="tcp", probe="state-change",
        conn_uuid=connection_uuid(host, "b", cookie), src="10.0.0.1", sport=40000 + cookie, dst="10.0.0.2",
        dport=443, prev_state=prev, state=new,
    )  # fmt: skip


def drop(host: str, seq: int, ts: float) -> SkbDrop:
    return SkbDrop(
        host_id=host, boot_id="b", seq=seq, ts_ns=seq, ts_wall=ts, provider="skb", probe="m-free", skb_uid=seq,
        drop_reason=2, drop_reason_str="NO_SOCKET", drop_location="tcp_v4_rcv+0x1f4", len=60,
    )  # fmt: skip


def fresh(since: float) -> tuple[dict[str, int], dict[str, int]]:
    """The counts the Overview made before: one COUNT per host and kind, and per host."""
    records = {
        h: sum(m.objects.filter(host_id=h, ts_wall__gte=since).count() for m in KIND_MODELS.values()) for h in HOSTS
    }
    opened = {h: Connection.objects.filter(host_id=h, closed=False).count() for h in HOSTS}
    return records, opened


def grouped(since: float) -> tuple[dict[str, int], dict[str, int]]:
    return overview_counts.records_since(HOSTS, since), overview_counts.open_connections(HOSTS)


def test_the_grouped_counts_equal_a_count_per_host_after_ingest_retention_and_deletion() -> None:
    now = time.time()
    store_batch(
        [state("web1", i, i, now - 100 + i, "ESTABLISHED") for i in range(1, 6)]
        + [state("web2", i, i, now - 5, "ESTABLISHED") for i in range(1, 3)]
        + [drop("web1", 100 + i, now - i) for i in range(4)]
        + [drop("web2", 200, now - 3 * 86400)]
    )
    store_batch(
        [state("web1", 10, 1, now - 2, "CLOSED", "ESTABLISHED"), state("web1", 11, 2, now - 1, "CLOSED", "ESTABLISHED")]
    )
    since = now - 10
    assert grouped(since) == fresh(since) == ({"web1": 6, "web2": 2, "idle": 0}, {"web1": 3, "web2": 2, "idle": 0})
    assert grouped(0.0) == fresh(0.0) == ({"web1": 11, "web2": 3, "idle": 0}, {"web1": 3, "web2": 2, "idle": 0})

    retention.trim(retention.Policy(days=1, rows=0, batch=100), now=now)  # web2's old drop goes
    assert grouped(0.0) == fresh(0.0) == ({"web1": 11, "web2": 2, "idle": 0}, {"web1": 3, "web2": 2, "idle": 0})

    Connection.objects.filter(host_id="web2").delete()
    StateRow.objects.filter(host_id="web1", seq__lte=2).delete()
    assert grouped(0.0) == fresh(0.0) == ({"web1": 9, "web2": 2, "idle": 0}, {"web1": 3, "web2": 0, "idle": 0})
    assert overview_counts.records_since([], 0.0) == overview_counts.open_connections([]) == {}


def test_the_overview_shows_each_hosts_counts() -> None:
    now = time.time()
    for name in HOSTS:
        Host.objects.create(name=name)
    store_batch([state("web1", i, i, now - 1, "ESTABLISHED") for i in range(1, 4)] + [drop("web2", 1, now - 2)])
    client = Client()
    client.force_login(get_user_model().objects.create_user("viewer", password="pw-for-tests-only"))
    hosts = client.get("/api/dash/overview").json()["hosts"]
    assert [(h["host_id"], h["open"], h["records_per_s"]) for h in hosts] == [
        ("idle", 0, 0.0), ("web1", 3, 0.3), ("web2", 0, 0.1)]  # fmt: skip


def _without_shortcut(since: float) -> Any:
    """``state TIME_WAIT`` as it was written before the last_seen shortcut."""
    entered = StateRow.objects.filter(
        host_id=OuterRef("host_id"), conn_uuid=OuterRef("conn_uuid"), state="TIME_WAIT", ts_wall__gte=since
    )
    return Connection.objects.filter(Q(state="TIME_WAIT") | (Q(state__in=("TIME_WAIT", "CLOSED")) & Q(Exists(entered))))


def test_state_time_wait_keeps_exactly_the_rows_it_kept_without_the_last_seen_shortcut() -> None:
    now = time.time()
    store_batch(
        [state("web1", 1, 1, now - 30, "TIME_WAIT", "FIN_WAIT_2"), state("web1", 2, 1, now - 20, "CLOSED", "TIME_WAIT")]
        + [state("web1", 3, 2, now - 200, "TIME_WAIT", "FIN_WAIT_2"), state("web1", 4, 2, now - 190, "CLOSED", "TIME_WAIT")]
        + [state("web1", 5, 3, now - 10, "TIME_WAIT", "FIN_WAIT_2")]
        + [state("web1", 6, 4, now - 5, "ESTABLISHED")]
    )  # fmt: skip
    found = sorted(queries.filtered("state TIME_WAIT").values_list("conn_uuid", flat=True))
    before = sorted(_without_shortcut(now - queries.TIME_WAIT_S).values_list("conn_uuid", flat=True))
    assert found == before == sorted(connection_uuid("web1", "b", c) for c in (1, 3))
    # and its negation: every other connection
    others = sorted(queries.filtered("state != TIME_WAIT").values_list("conn_uuid", flat=True))
    assert others == sorted(connection_uuid("web1", "b", c) for c in (2, 4))


def test_the_top_by_bytes_is_the_sort_by_total_bytes_nulls_as_zero_captures_and_empty_left_out() -> None:
    Host.objects.create(name="web1")
    rows = [(1, 500, None), (2, None, 700), (3, 100, 100), (4, None, None), (5, 0, 0), (6, 50, 1000)]
    for n, orig, resp in rows:
        Connection.objects.create(
            host_id="web1", boot_id="b", conn_uuid=connection_uuid("web1", "b", n), proto="tcp", first_seen=1.0,
            last_seen=2.0, bytes_orig=orig, bytes_resp=resp,
        )  # fmt: skip
    Connection.objects.create(
        host_id="capture:x", boot_id="b", conn_uuid=connection_uuid("capture:x", "b", 9), proto="tcp", first_seen=1.0,
        last_seen=2.0, bytes_orig=10**9,
    )  # fmt: skip
    client = Client()
    client.force_login(get_user_model().objects.create_user("viewer", password="pw-for-tests-only"))
    top = client.get("/api/dash/overview").json()["top_bytes"]
    uuids = {connection_uuid("web1", "b", n): n for n, _, _ in rows}
    assert [uuids[r["conn_uuid"]] for r in top] == [6, 2, 1, 3]


def tw(seq: int, cookie: int, dst: str, closed: bool) -> list[TcpStateChange]:
    """A socket to dst:443 that entered TIME_WAIT 10 s ago; closed: its state is CLOSED since."""
    now, uuid = time.time(), connection_uuid("web1", "b", cookie)
    base: dict[str, Any] = {"host_id": "web1", "boot_id": "b", "ts_ns": seq, "provider": "tcp", "probe": "state-change",
            "conn_uuid": uuid, "src": "10.0.0.1", "sport": 40000 + cookie, "dst": dst, "dport": 443}  # fmt: skip
    out = [TcpStateChange(**base, seq=seq, ts_wall=now - 10, prev_state="FIN_WAIT_2", state="TIME_WAIT")]
    if closed:
        out.append(TcpStateChange(**base, seq=seq + 1, ts_wall=now - 9, prev_state="TIME_WAIT", state="CLOSED"))
    return out


def test_the_time_wait_top_counts_stored_and_recently_entered_sockets_together_as_one_query_did() -> None:
    from webapp.dashboard import own_traffic, time_wait

    # stored TIME_WAIT: x 3, y 2, z 1; CLOSED having entered it 10 s ago: z 2, w 1
    plan = [("10.0.0.10", 3, 0), ("10.0.0.20", 2, 0), ("10.0.0.30", 1, 2), ("10.0.0.40", 0, 1)]
    seq, cookie, records = 1, 1, []
    for dst, stored, entered in plan:
        for closed in [False] * stored + [True] * entered:
            records += tw(seq, cookie, dst, closed)
            seq, cookie = seq + 2, cookie + 1
    store_batch(records)
    one_query = (
        queries.filtered("state TIME_WAIT").exclude(own_traffic.own_q())
        .filter(host_id__in=["web1"], dst__isnull=False, dport__isnull=False)
        .values("host_id", "dst", "dport").annotate(sockets=Count("id"))
        .order_by("-sockets", "host_id", "dst", "dport")
    )  # fmt: skip
    for limit in (1, 2, 3, 10):
        got = [(r["dst"], r["sockets"]) for r in time_wait.by_destination(["web1"], limit)]
        assert got == [(r["dst"], r["sockets"]) for r in one_query[:limit]]
    assert [(r["dst"], r["sockets"]) for r in time_wait.by_destination(["web1"], 2)] == [
        ("10.0.0.10", 3), ("10.0.0.30", 3)]  # fmt: skip
    assert (
        time_wait.by_destination(["web1"], 10)[-1]["q"]
        == "host web1 and state TIME_WAIT and dst 10.0.0.40 and dport 443"
    )
    assert time_wait.by_destination(["other"]) == []

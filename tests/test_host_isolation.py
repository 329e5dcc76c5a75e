"""Host isolation: one host's token cannot touch another host's connections, and every read of a
connection is keyed by its host as well as its conn_uuid (webapp/traces/owner.py).

Uses the fixed cast of webapp_cast.py: host A (`host-a`, token_a) and host B (`host-b`,
token_b); `viewer` reads. Live records carry a socket cookie, from which ingest derives the
conn_uuid again for the token's host; capture-style records carry neither cookie nor stream,
so the only way two hosts end up with one conn_uuid is such a record arriving before the
other host's first record of it ("shared" below) -- then each host's reads see only their own.
"""

# ruff: noqa: F811 -- pytest fixtures imported from webapp_cast are redefined as test arguments
from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from webapp_cast import BOOT, T0, Cast, cast, env, post, state  # noqa: F401 (cast is a fixture)

from translators import records as r
from translators.records import connection_uuid
from webapp.traces.models import Connection, TcpReset, TcpStateChange

COOKIE_A = 4242
CONN_A = connection_uuid("host-a", BOOT, COOKIE_A)  # host A's live connection
COOKIE_SHARED = 777
# Host A's next live connection, whose uuid host B guessed and used first in records that
# carry no cookie (accepted then: no host had it yet).
SHARED = connection_uuid("host-a", BOOT, COOKIE_SHARED)


def live(host: str, seq: int, prev: str, new: str, **kw: Any) -> r.TcpStateChange:
    cookie = kw.pop("cookie", COOKIE_A)
    uuid = kw.pop("conn", connection_uuid(host, BOOT, cookie))
    return state(host, seq, prev, new, conn=uuid, sock_cookie=cookie, **kw)


def reset(host: str, seq: int, conn: str, cookie: int | None = None) -> r.TcpReset:
    return r.TcpReset(
        **env(host, seq, conn_uuid=conn, sock_cookie=cookie), provider="tcp", probe="reset", sender="peer"
    )


def alert(host: str, seq: int, conn: str, cookie: int | None = None, rule: str = "K1") -> r.Alert:
    return r.Alert(
        **env(host, seq, conn_uuid=conn, sock_cookie=cookie),
        provider="nettrail",
        probe="alert",
        rule_id=rule,
        alert_id=f"{host}-{rule}-{seq}",
        severity="warning",
        start=T0 + seq,
        message=f"{rule} on {host}",
    )


def viewer(cast: Cast) -> Client:
    client = Client()
    client.force_login(cast.viewer)
    return client


@pytest.fixture
def a_connection(cast: Cast) -> Cast:
    """Host A's live connection CONN_A, ESTABLISHED."""
    answer = post(Client(), cast.token_a, [live("host-a", 1, "SYN_SENT", "ESTABLISHED")])
    assert answer.status_code == 200, answer.content
    return cast


@pytest.fixture
def shared(cast: Cast) -> Cast:
    """SHARED on both hosts: B's capture-style records first, then A's live ones (derived
    from A's cookie, so accepted)."""
    b_records = [
        state("host-b", 1, "SYN_SENT", "ESTABLISHED", conn=SHARED, dport=8443),
        reset("host-b", 2, SHARED),
        state("host-b", 3, "ESTABLISHED", "CLOSED", conn=SHARED, dport=8443),
        alert("host-b", 4, SHARED, rule="K14"),
    ]
    assert post(Client(), cast.token_b, b_records).status_code == 200
    a_records = [
        live("host-a", 1, "SYN_SENT", "ESTABLISHED", cookie=COOKIE_SHARED),
        alert("host-a", 2, SHARED, cookie=COOKIE_SHARED, rule="K1"),
    ]
    assert post(Client(), cast.token_a, a_records).status_code == 200
    return cast


# --- ingest ------------------------------------------------------------------------------------


def test_once_a_host_has_a_connection_another_hosts_cookieless_records_cannot_join_it(shared: Cast) -> None:
    answer = post(Client(), shared.token_b, [reset("host-b", 9, SHARED)])
    assert answer.status_code == 403
    assert answer.json()["error"] == f"record 0: conn_uuid {SHARED} belongs to another host"


def test_ingest_refuses_another_hosts_conn_uuid_on_a_live_record(a_connection: Cast) -> None:
    # B's cookie does not give A's uuid: the record was not derived from B.
    forged = [reset("host-b", 1, CONN_A, cookie=COOKIE_A), live("host-b", 2, "ESTABLISHED", "CLOSED", conn=CONN_A)]
    answer = post(Client(), a_connection.token_b, forged)
    assert answer.status_code == 403
    assert answer.json() == {
        "error": f"record 0: conn_uuid {CONN_A} was not derived from host 'host-b'",
        "index": 0,
        "field": "conn_uuid",
    }
    conn = Connection.objects.get(conn_uuid=CONN_A)
    assert (conn.host_id, conn.state, conn.resets, conn.anomaly) == ("host-a", "ESTABLISHED", 0, False)
    assert TcpReset.objects.count() == 0


def test_ingest_refuses_a_record_without_cookie_naming_another_hosts_connection(a_connection: Cast) -> None:
    answer = post(
        Client(),
        a_connection.token_b,
        [state("host-b", 1, "ESTABLISHED", "CLOSED", conn="x"), reset("host-b", 2, CONN_A)],
    )
    assert answer.status_code == 403
    assert answer.json()["error"] == f"record 1: conn_uuid {CONN_A} belongs to another host"
    assert answer.json()["index"] == 1
    assert TcpStateChange.objects.filter(host_id="host-b").count() == 0  # the batch is refused whole


def test_ingest_refuses_an_alert_naming_another_hosts_connection(a_connection: Cast) -> None:
    answer = post(Client(), a_connection.token_b, [alert("host-b", 1, CONN_A, cookie=COOKIE_A)])
    assert answer.status_code == 403
    conn = Connection.objects.get(conn_uuid=CONN_A)
    assert (conn.alerts, conn.anomaly) == (0, False)


def test_ingest_accepts_the_hosts_own_derived_uuids(a_connection: Cast) -> None:
    own = [live("host-b", 1, "SYN_SENT", "ESTABLISHED", cookie=COOKIE_A)]  # same cookie, B's own uuid
    answer = post(Client(), a_connection.token_b, own)
    assert answer.status_code == 200, answer.content
    assert sorted(Connection.objects.values_list("host_id", "conn_uuid")) == sorted(
        [("host-a", CONN_A), ("host-b", connection_uuid("host-b", BOOT, COOKIE_A))]
    )


def test_a_capture_flow_uuid_must_come_from_the_hosts_stream(cast: Cast) -> None:
    segment = r.TcpSegment(
        **env("host-b", 1, conn_uuid=r.flow_uuid("host-a", BOOT, "tcp", 7)),
        provider="ip",
        probe="packet",
        stream=7,
    )
    assert post(Client(), cast.token_b, [segment]).status_code == 403
    segment.conn_uuid = r.flow_uuid("host-b", BOOT, "tcp", 7)
    assert post(Client(), cast.token_b, [segment]).status_code == 200


# --- connection fold ---------------------------------------------------------------------------


def test_each_host_folds_only_its_own_records_into_its_own_row(shared: Cast) -> None:
    rows = {c.host_id: c for c in Connection.objects.filter(conn_uuid=SHARED)}
    assert sorted(rows) == ["host-a", "host-b"]
    a, b = rows["host-a"], rows["host-b"]
    assert (a.state, a.resets, a.alerts, a.dport) == ("ESTABLISHED", 0, 1, 443)
    assert (b.state, b.resets, b.alerts, b.dport) == ("CLOSED", 1, 1, 8443)


# --- lifecycle and connection API ---------------------------------------------------------------


def test_a_shared_uuid_needs_its_host_and_then_shows_only_that_hosts_records(shared: Cast) -> None:
    client = viewer(shared)
    answer = client.get(f"/api/connections/{SHARED}/lifecycle")
    assert answer.status_code == 409
    assert answer.json() == {"error": f"connection {SHARED} exists on hosts host-a, host-b: add host="}
    for host, kinds in (
        ("host-a", ["tcp_state", "alert"]),
        ("host-b", ["tcp_state", "tcp_reset", "tcp_state", "alert"]),
    ):
        life = client.get(f"/api/connections/{SHARED}/lifecycle", {"host": host}).json()
        assert [rec["kind"] for rec in life["records"]] == kinds
        assert {rec["host_id"] for rec in life["records"]} == {host}
        detail = client.get(f"/api/connections/{SHARED}", {"host": host}).json()
        assert detail["connection"]["host_id"] == host
        assert sum(detail["records"].values()) == len(kinds)


def test_a_live_connection_is_found_without_naming_its_host(a_connection: Cast) -> None:
    life = viewer(a_connection).get(f"/api/connections/{CONN_A}/lifecycle").json()
    assert [(rec["host_id"], rec["state"]) for rec in life["records"]] == [("host-a", "ESTABLISHED")]
    assert viewer(a_connection).get(f"/api/connections/{CONN_A}", {"host": "host-b"}).status_code == 404


def test_the_dashboards_connection_page_data_is_the_hosts_own(shared: Cast) -> None:
    client = viewer(shared)
    assert client.get(f"/api/dash/connections/{SHARED}").status_code == 409
    body = client.get(f"/api/dash/connections/{SHARED}", {"host": "host-a"}).json()
    assert body["conn"]["host_id"] == "host-a"
    assert [a["rule_id"] for a in body["alerts"]] == ["K1"]
    assert body["conn"]["alert_rules"] == ["K1"]
    assert [t.get("state") for t in body["timeline"] if t.get("state")] == ["ESTABLISHED"]
    page = client.get(f"/connections/{SHARED}/", {"host": "host-b"})
    assert page.status_code == 200
    assert f"/api/connections/{SHARED}/export?format=json&amp;host=host-b" in page.content.decode()


def test_every_json_view_of_one_connection_answers_an_unnamed_shared_uuid_and_a_wrong_host_alike(
    shared: Cast,
) -> None:
    """The host-token API's and the dashboard's connection views (one lookup: owner.connection_or_error)."""
    client = viewer(shared)
    ambiguous = {"error": f"connection {SHARED} exists on hosts host-a, host-b: add host="}
    for path in (
        f"/api/connections/{SHARED}",
        f"/api/connections/{SHARED}/lifecycle",
        f"/api/dash/connections/{SHARED}",
        f"/api/dash/connections/{SHARED}/stitched",
    ):
        answer = client.get(path)
        assert (answer.status_code, answer.json()) == (409, ambiguous), path
        answer = client.get(path, {"host": "host-c"})
        assert (answer.status_code, answer.json()) == (404, {"error": f"no connection {SHARED}"}), path


# --- exports -------------------------------------------------------------------------------------


def test_exports_hold_only_the_named_hosts_records(shared: Cast) -> None:
    client = viewer(shared)
    report = client.get(f"/api/connections/{SHARED}/export", {"format": "json", "host": "host-a"})
    assert report.status_code == 200
    text = b"".join(report.streaming_content).decode()  # type: ignore[attr-defined]
    assert '"host-a"' in text and "host-b" not in text
    assert client.get(f"/api/connections/{SHARED}/export", {"format": "json"}).status_code == 400
    # the dashboard's old export URL redirects to the one report exporter, host kept
    dash = client.get(f"/api/dash/connections/{SHARED}/export", {"format": "json", "host": "host-b"}, follow=True)
    assert dash.status_code == 200
    body = json.loads(b"".join(dash.streaming_content))  # type: ignore[attr-defined]
    assert [c["host_id"] for c in body["nettrail_report"]["connection"]] == ["host-b"]
    assert "host-a" not in json.dumps(body)


# --- alerts --------------------------------------------------------------------------------------


def test_the_alert_list_for_a_connection_and_host_is_that_hosts(shared: Cast) -> None:
    client = viewer(shared)
    rows = client.get("/api/alerts", {"conn": SHARED, "host": "host-b"}).json()["alerts"]
    assert [(a["host_id"], a["rule_id"]) for a in rows] == [("host-b", "K14")]


# --- metrics -------------------------------------------------------------------------------------


def test_a_host_token_reads_only_its_hosts_counters(shared: Cast) -> None:
    scrape = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {shared.token_a}")
    assert scrape.status_code == 200
    text = scrape.content.decode()
    assert 'nettrail_records_ingested_total{host="host-a",kind="tcp_state"} 1.0' in text
    assert "host-b" not in text
    assert "nettrail_hosts " not in text  # not even how many hosts there are
    assert "nettrail_ingest_request_duration_seconds" not in text
    full = viewer(shared).get("/metrics").content.decode()
    assert 'nettrail_records_ingested_total{host="host-b",kind="tcp_state"} 2.0' in full

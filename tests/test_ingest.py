"""POST /api/ingest: exact rows, idempotence, atomic batches, error statuses, channel pushes."""
# ruff: noqa: F811 -- pytest fixtures imported from webapp_cast are redefined as test arguments

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.test import Client, override_settings
from webapp_cast import BOOT, T0, Cast, cast, drop, post, retransmit, state  # noqa: F401 (cast is a fixture)

from translators import records as r
from translators.records import connection_uuid
from webapp.traces.models import Connection, Host, SkbDrop, TcpRetransmit, TcpStateChange

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def test_it_stores_a_msgpack_batch_as_exact_rows(cast: Cast) -> None:
    batch = [state("host-a", 1, "CLOSED", "SYN_SENT", comm="curl", pid=42), drop("host-a", 2), retransmit("host-a", 3)]
    resp = post(Client(), cast.token_a, batch)
    assert resp.status_code == 200
    assert resp.json() == {"stored": 3, "duplicates": 0, "tracing": None}
    row = TcpStateChange.objects.get()
    assert (row.host_id, row.boot_id, row.seq, row.ts_ns, row.ts_wall) == ("host-a", BOOT, 1, 1_000_000, T0 + 1)
    assert (row.prev_state, row.state, row.comm, row.pid, row.src, row.dport) == (
        "CLOSED", "SYN_SENT", "curl", 42, "10.0.0.1", 443,
    )  # fmt: skip
    assert (row.provider, row.probe, row.inferred, row.approx) == ("tcp", "state-change", False, [])
    assert list(SkbDrop.objects.values_list("seq", "drop_reason", "drop_reason_str")) == [(2, 2, "NO_SOCKET")]
    assert list(TcpRetransmit.objects.values_list("seq", "conn_uuid")) == [(3, "conn-1")]


def test_a_field_empty_in_the_first_record_of_a_kind_is_still_stored_for_the_others(cast: Cast) -> None:
    # store.py leaves out of the INSERT the columns NULL in every row, judged from the first.
    batch = [retransmit("host-a", 1), retransmit("host-a", 2, segs=3, tcp_seq=7), retransmit("host-a", 3, segs=0)]
    assert post(Client(), cast.token_a, batch).json() == {"stored": 3, "duplicates": 0, "tracing": None}
    rows = TcpRetransmit.objects.order_by("seq").values_list("seq", "segs", "tcp_seq", "state", "host_id")
    assert list(rows) == [(1, None, None, None, "host-a"), (2, 3, 7, None, "host-a"), (3, 0, None, None, "host-a")]


def test_it_stores_a_json_batch(cast: Cast) -> None:
    resp = post(Client(), cast.token_a, [drop("host-a", 7, reason="TCP_CSUM")], wire="json")
    assert resp.json() == {"stored": 1, "duplicates": 0, "tracing": None}
    assert list(SkbDrop.objects.values_list("seq", "drop_reason_str")) == [(7, "TCP_CSUM")]


def test_it_stores_a_batch_sent_twice_once(cast: Cast) -> None:
    batch = [state("host-a", 1, "CLOSED", "SYN_SENT"), retransmit("host-a", 2), retransmit("host-a", 3)]
    assert post(Client(), cast.token_a, batch).json() == {"stored": 3, "duplicates": 0, "tracing": None}
    assert post(Client(), cast.token_a, batch).json() == {"stored": 0, "duplicates": 3, "tracing": None}
    assert TcpStateChange.objects.count() == 1
    assert TcpRetransmit.objects.count() == 2
    assert Connection.objects.get().retransmits == 2  # the resend did not count twice


def test_it_counts_a_record_repeated_inside_one_batch_once(cast: Cast) -> None:
    batch = [retransmit("host-a", 5), retransmit("host-a", 5), retransmit("host-a", 6)]
    assert post(Client(), cast.token_a, batch).json() == {"stored": 2, "duplicates": 1, "tracing": None}


def test_it_keeps_the_same_seq_of_another_boot(cast: Cast) -> None:
    other_boot = r.TcpRetransmit(
        host_id="host-a", boot_id="boot-2", seq=1, ts_ns=1, ts_wall=T0, provider="tcp", probe="retransmit"
    )
    assert post(Client(), cast.token_a, [retransmit("host-a", 1), other_boot]).json() == {
        "stored": 2,
        "duplicates": 0,
        "tracing": None,
    }


def test_it_stores_nothing_from_a_batch_with_one_bad_record_and_names_it(cast: Cast) -> None:
    good = [msgspec_builtins(state("host-a", i, "CLOSED", "SYN_SENT")) for i in range(1, 6)]
    good[3]["seq"] = "four"
    resp = post(Client(), cast.token_a, good, wire="json")
    assert resp.status_code == 400
    assert resp.json() == {"error": "record 3: seq: Expected `int`, got `str`", "index": 3, "field": "seq"}
    assert TcpStateChange.objects.count() == 0
    assert Connection.objects.count() == 0


def test_it_names_the_field_of_a_value_outside_its_choices(cast: Cast) -> None:
    batch = [msgspec_builtins(retransmit("host-a", 1)), msgspec_builtins(state("host-a", 2, "CLOSED", "SYN_SENT"))]
    batch[1]["state"] = "HALF_OPEN"
    resp = post(Client(), cast.token_a, batch)
    assert resp.status_code == 400
    assert (resp.json()["index"], resp.json()["field"]) == (1, "state")
    assert resp.json()["error"].startswith("record 1: state: 'HALF_OPEN' is not one of CLOSED, LISTEN")
    assert TcpRetransmit.objects.count() == 0


def test_it_rejects_an_unknown_record_kind_naming_the_kind_field(cast: Cast) -> None:
    batch = [
        msgspec_builtins(retransmit("host-a", 1)),
        {**msgspec_builtins(retransmit("host-a", 2)), "kind": "tcp_magic"},
    ]
    resp = post(Client(), cast.token_a, batch)
    assert resp.status_code == 400
    assert resp.json() == {"error": "record 1: kind: Invalid value 'tcp_magic'", "index": 1, "field": "kind"}


def test_it_rejects_an_integer_the_database_cannot_hold(cast: Cast) -> None:
    too_big = 2**64 - 1  # a valid socket cookie, over SQLite's and PostgreSQL's signed 64 bits
    batch = [
        retransmit("host-a", 1),
        retransmit("host-a", 2, conn=connection_uuid("host-a", BOOT, too_big), sock_cookie=too_big),
    ]
    resp = post(Client(), cast.token_a, batch)
    assert resp.status_code == 400
    assert (resp.json()["index"], resp.json()["field"]) == (1, "sock_cookie")
    assert TcpRetransmit.objects.count() == 0


def test_it_rejects_a_body_that_is_not_a_list(cast: Cast) -> None:
    resp = post(Client(), cast.token_a, b'{"kind": "tcp_state"}', wire="json")
    assert resp.status_code == 400
    assert resp.json() == {"error": "malformed batch: Expected `array`, got `object`"}
    resp = post(Client(), cast.token_a, b"[{", wire="json")
    assert resp.json() == {"error": "malformed json body: Input data was truncated"}


def test_it_stores_the_valid_batches_before_and_after_a_bad_one(cast: Cast) -> None:
    client = Client()
    assert post(client, cast.token_a, [retransmit("host-a", 1)]).status_code == 200
    bad = [msgspec_builtins(retransmit("host-a", 2)), {"kind": "tcp_retransmit"}]
    assert post(client, cast.token_a, bad).status_code == 400
    assert post(client, cast.token_a, [retransmit("host-a", 3)]).status_code == 200
    assert list(TcpRetransmit.objects.order_by("seq").values_list("seq", flat=True)) == [1, 3]


def test_it_rejects_a_missing_or_wrong_token(cast: Cast) -> None:
    batch = [retransmit("host-a", 1)]
    assert post(Client(), None, batch).json() == {"error": "missing ingest token"}
    assert post(Client(), None, batch).status_code == 401
    wrong = cast.token_a[:-4] + ("AAAA" if not cast.token_a.endswith("AAAA") else "BBBB")
    resp = post(Client(), wrong, batch)
    assert (resp.status_code, resp.json()) == (401, {"error": "unknown ingest token"})
    resp = Client().post(
        "/api/ingest", b"[]", content_type="application/json", HTTP_AUTHORIZATION=f"Basic {cast.token_a}"
    )
    assert resp.status_code == 401
    assert TcpRetransmit.objects.count() == 0


def test_it_forbids_records_of_another_host(cast: Cast) -> None:
    resp = post(Client(), cast.token_a, [retransmit("host-a", 1), retransmit("host-b", 2)])
    assert resp.status_code == 403
    assert resp.json() == {
        "error": "record 1: host_id 'host-b' is not this token's host 'host-a'",
        "index": 1,
        "field": "host_id",
    }
    assert TcpRetransmit.objects.count() == 0
    assert post(Client(), cast.token_b, [retransmit("host-b", 2)]).json() == {
        "stored": 1,
        "duplicates": 0,
        "tracing": None,
    }


@override_settings(NETTRAIL_INGEST_MAX_BYTES=2048)
def test_it_rejects_a_body_over_the_limit(cast: Cast) -> None:
    batch = [retransmit("host-a", i) for i in range(1, 40)]
    resp = post(Client(), cast.token_a, batch)
    assert (resp.status_code, resp.json()) == (413, {"error": "body over 2048 bytes"})
    assert TcpRetransmit.objects.count() == 0
    assert post(Client(), cast.token_a, batch[:3]).json() == {"stored": 3, "duplicates": 0, "tracing": None}


def test_it_answers_wrong_method_and_content_type_in_json(cast: Cast) -> None:
    resp = Client().get("/api/ingest", HTTP_AUTHORIZATION=f"Bearer {cast.token_a}")
    assert (resp.status_code, resp.json()) == (405, {"error": "use POST"})
    resp = Client().post("/api/ingest", b"[]", content_type="text/plain", HTTP_AUTHORIZATION=f"Bearer {cast.token_a}")
    assert resp.status_code == 415
    assert resp.json()["error"].startswith("Content-Type must be one of application/json")


def test_it_marks_the_token_and_host_as_used(cast: Cast) -> None:
    assert post(Client(), cast.token_a, [retransmit("host-a", 1)]).status_code == 200
    assert Host.objects.get(name="host-a").last_seen is not None
    assert Host.objects.get(name="host-b").last_seen is None
    assert cast.host_a.tokens.get().last_used is not None


@override_settings(CHANNEL_LAYERS={"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}})
def test_it_pushes_new_records_to_host_connection_and_alert_groups(cast: Cast) -> None:
    layer = get_channel_layer()
    channels = {group: async_to_sync(layer.new_channel)() for group in ("host.host-a", "conn.conn-1", "alerts")}
    for group, channel in channels.items():
        async_to_sync(layer.group_add)(group, channel)
    alert = r.Alert(
        **{"host_id": "host-a", "boot_id": BOOT, "seq": 3, "ts_ns": 3, "ts_wall": T0 + 3, "conn_uuid": "conn-1"},
        provider="nettrail", probe="alert", rule_id="K1", severity="warning", start=T0 + 3, message="retransmissions",
    )  # fmt: skip
    batch = [state("host-a", 1, "CLOSED", "SYN_SENT"), drop("host-a", 2), alert]
    assert post(Client(), cast.token_a, batch).status_code == 200
    host_msg = async_to_sync(layer.receive)(channels["host.host-a"])
    assert host_msg["type"] == "trace.batch"
    assert [(m["kind"], m["seq"]) for m in host_msg["records"]] == [("tcp_state", 1), ("skb_drop", 2), ("alert", 3)]
    conn_msg = async_to_sync(layer.receive)(channels["conn.conn-1"])
    assert [m["seq"] for m in conn_msg["records"]] == [1, 3]
    alert_msg = async_to_sync(layer.receive)(channels["alerts"])
    assert alert_msg["records"] == [r.to_builtins(alert)]
    # A resent batch stores nothing new, so nothing is pushed again.
    assert post(Client(), cast.token_a, batch).json() == {"stored": 0, "duplicates": 3, "tracing": None}
    for channel in channels.values():
        async_to_sync(receive_nothing)(layer, channel)


async def receive_nothing(layer: Any, channel: str) -> None:
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(layer.receive(channel), 0.05)


def msgspec_builtins(rec: r.Record) -> dict[str, object]:
    return r.to_builtins(rec)

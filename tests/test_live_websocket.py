"""The live websocket /ws/live/: login, subscriptions, batched pushes, slow clients (real Channels stack)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client, override_settings
from ingest_stub import make_records
from live_ws import BIG_LAYER, ORIGIN, batch, connect, records

from webapp.asgi import application
from webapp.traces.consumers import (
    CLOSE_TOO_SLOW,
    CLOSE_UNAUTHENTICATED,
    MAX_MESSAGE_BYTES,
    PUSH_HZ,
    host_group,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def session_cookie() -> Iterator[tuple[bytes, bytes]]:
    user = get_user_model().objects.create_user("viewer", password="not-used-here")
    client = Client()
    client.force_login(user)
    yield (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


async def test_it_rejects_an_anonymous_connection() -> None:
    comm = WebsocketCommunicator(application, "/ws/live/", headers=[ORIGIN, (b"host", b"127.0.0.1")])
    connected, code = await comm.connect(timeout=10)
    assert (connected, code) == (False, CLOSE_UNAUTHENTICATED)


async def test_a_subscribed_client_gets_its_hosts_records_of_the_kinds_it_asked_for(session_cookie) -> None:
    comm = await connect(session_cookie, {"host": "alpha", "kind": ["tcp_state"]})
    await batch(host_group("alpha"), records("alpha", 0, 3) + records("alpha", 3, 2, kind="siftr_sample"))
    await batch(host_group("beta"), records("beta", 0, 5))
    message = await comm.receive_json_from(timeout=10)
    assert message["type"] == "records" and isinstance(message["id"], int)
    assert [(r["host_id"], r["seq"], r["kind"]) for r in message["records"]] == [
        ("alpha", 0, "tcp_state"),
        ("alpha", 1, "tcp_state"),
        ("alpha", 2, "tcp_state"),
    ]
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


async def test_a_connection_subscription_gets_only_that_connection(session_cookie) -> None:
    comm = await connect(session_cookie, {"conn": "conn-1"})
    await batch("conn.conn-1", [r for r in records("alpha", 0, 9) if r["conn_uuid"] == "conn-1"])
    await batch("conn.conn-2", [r for r in records("alpha", 0, 9) if r["conn_uuid"] == "conn-2"])
    message = await comm.receive_json_from(timeout=10)
    assert [r["seq"] for r in message["records"]] == [1, 4, 7]
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


async def test_after_unsubscribing_nothing_more_arrives(session_cookie) -> None:
    comm = await connect(session_cookie, {"host": "alpha", "alerts": True})
    await comm.send_json_to({"unsubscribe": {"host": "alpha"}})
    assert await comm.receive_json_from(timeout=10) == {"type": "subscribed", "groups": ["alerts"]}
    await batch(host_group("alpha"), records("alpha", 0, 5))
    assert await comm.receive_nothing(timeout=0.3)
    await batch("alerts", records("alpha", 5, 1, kind="alert"))
    assert [r["seq"] for r in (await comm.receive_json_from(timeout=10))["records"]] == [5]
    await comm.disconnect()


async def test_a_record_reaching_it_through_two_groups_is_pushed_once(session_cookie) -> None:
    comm = await connect(session_cookie, {"host": "alpha", "conn": "conn-0"})
    recs = records("alpha", 0, 3)
    await batch(host_group("alpha"), recs)
    await batch("conn.conn-0", [recs[0]])
    message = await comm.receive_json_from(timeout=10)
    assert [r["seq"] for r in message["records"]] == [0, 1, 2]
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


async def test_bad_messages_get_an_error_naming_the_problem(session_cookie) -> None:
    comm = await connect(session_cookie)
    await comm.send_json_to({"subscribe": {"host": "alpha", "kind": ["tcp_stat"]}})
    assert await comm.receive_json_from(timeout=10) == {"type": "error", "error": "unknown record kind 'tcp_stat'"}
    await comm.send_to(text_data="not json")
    assert await comm.receive_json_from(timeout=10) == {"type": "error", "error": "messages are JSON objects"}
    await comm.send_json_to({"subscribe": {}})
    assert await comm.receive_json_from(timeout=10) == {"type": "error", "error": "name a host, a conn or alerts"}
    await comm.disconnect()


# The buffer holds the whole burst: this test sends all of it before reading, and how much
# a busy machine flushes meanwhile varies; overflow has its own test below.
@override_settings(CHANNEL_LAYERS=BIG_LAYER, NETTRAIL_LIVE_MAX_BUFFER=200_000)
async def test_a_burst_of_100000_records_makes_a_few_messages_and_delivers_them_all(session_cookie) -> None:
    comm = await connect(session_cookie, {"host": "alpha"})
    started = time.monotonic()
    for start in range(0, 100_000, 1000):  # 100 channel messages, as ingest sends them
        await batch(host_group("alpha"), records("alpha", start, 1000))
    seqs: list[int] = []
    messages = 0
    while len(seqs) < 100_000:
        message = await comm.receive_json_from(timeout=30)  # a bound for a loaded machine
        messages += 1
        assert message["type"] == "records", message
        seqs.extend(r["seq"] for r in message["records"])
        await comm.send_json_to({"ack": message["id"]})
    elapsed = time.monotonic() - started
    assert seqs == list(range(100_000))
    # At most PUSH_HZ pushes a second (the first one at once), each up to MAX_RECORDS_PER_MESSAGE
    # records: about 5 messages here, more only when a loaded machine spreads the burst out
    # in time; never one per ingest message.
    # Messages are cut at MAX_MESSAGE_BYTES: these ~100-byte records make 10 or 11.
    # (the bound follows the burst's own duration: no fixed cap that a busy machine could cross)
    assert messages <= 1 + int(elapsed * PUSH_HZ) + 100_000 * 110 // MAX_MESSAGE_BYTES
    assert messages < 100  # never one per ingest message
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


@override_settings(CHANNEL_LAYERS=BIG_LAYER, NETTRAIL_LIVE_WINDOW=1, NETTRAIL_LIVE_MAX_BUFFER=5000)
async def test_a_client_that_stops_acknowledging_is_told_its_exact_gap_then_dropped(session_cookie) -> None:
    slow = await connect(session_cookie, {"host": "alpha"})
    fast = await connect(session_cookie, {"host": "alpha"})
    await batch(host_group("alpha"), records("alpha", 0, 10))
    for comm in (slow, fast):
        first = await comm.receive_json_from(timeout=10)
        assert first["type"] == "records"
        await comm.send_json_to({"ack": first["id"]})
    got = 10
    for start in range(10, 20_010, 1000):
        await batch(host_group("alpha"), records("alpha", start, 1000))
        while got < start + 1000:  # the fast client reads and acknowledges everything so far
            message = await fast.receive_json_from(timeout=10)
            got += len(message["records"])
            await fast.send_json_to({"ack": message["id"]})
    second = await slow.receive_json_from(timeout=10)
    assert second["type"] == "records"  # window 1: one unacknowledged push, then records wait in its buffer
    assert await slow.receive_nothing(timeout=0.3)
    layer = get_channel_layer()
    # Overflowed, it stays in the group only to count what it misses (nothing is buffered).
    assert members(layer, host_group("alpha")) == 2
    await slow.send_json_to({"ack": second["id"]})  # it reads again: told its exact gap, then dropped
    missed = 20_010 - 10 - len(second["records"])
    assert await slow.receive_json_from(timeout=10) == {"type": "gap", "missed": missed, "dropped": True}
    assert await slow.receive_output(timeout=10) == {"type": "websocket.close", "code": CLOSE_TOO_SLOW}
    assert members(layer, host_group("alpha")) == 1  # only the fast client is left in the group
    assert got == 20_010
    assert await fast.receive_nothing(timeout=0.2)
    await fast.disconnect()


@override_settings(
    CHANNEL_LAYERS=BIG_LAYER, NETTRAIL_LIVE_WINDOW=1, NETTRAIL_LIVE_MAX_BUFFER=5000, NETTRAIL_LIVE_STALL_SECONDS=0.2
)
async def test_a_stalled_client_is_told_its_gap_and_dropped_when_the_stall_timer_fires(session_cookie) -> None:
    slow = await connect(session_cookie, {"host": "alpha"})
    await batch(host_group("alpha"), records("alpha", 0, 1000))
    first = await slow.receive_json_from(timeout=10)
    assert first["type"] == "records"  # never acknowledged: everything after waits, then overflows
    for start in range(1000, 8000, 1000):
        await batch(host_group("alpha"), records("alpha", start, 1000))
    gap = await slow.receive_json_from(timeout=10)
    assert gap == {"type": "gap", "missed": 8000 - len(first["records"]), "dropped": True}
    assert await slow.receive_output(timeout=10) == {"type": "websocket.close", "code": CLOSE_TOO_SLOW}
    assert members(get_channel_layer(), host_group("alpha")) == 0


async def test_a_message_the_channel_layer_dropped_is_reported_as_a_gap(session_cookie) -> None:
    comm = await connect(session_cookie, {"host": "alpha"})
    group = host_group("alpha")
    layer = get_channel_layer()
    sent = {"type": "trace.batch", "group": group, "sender": "s1"}
    await layer.group_send(group, {**sent, "offset": 0, "records": records("alpha", 0, 5)})
    # Offsets 5..11 never arrive (a full channel drops silently); 12.. does.
    await layer.group_send(group, {**sent, "offset": 12, "records": records("alpha", 12, 3)})
    got: list[Any] = []
    while sum(len(m.get("records", ())) for m in got) < 8:
        message = await comm.receive_json_from(timeout=10)
        got.append(message)
        if message["type"] == "records":
            await comm.send_json_to({"ack": message["id"]})
    assert [m for m in got if m["type"] == "gap"] == [{"type": "gap", "missed": 7}]
    assert [r["seq"] for m in got for r in m.get("records", ())] == [0, 1, 2, 3, 4, 12, 13, 14]
    await comm.disconnect()


def members(layer: Any, group: str) -> int:
    return len(layer.groups.get(group, {}))


@pytest.mark.skipif(
    not os.environ.get("NETTRAIL_TEST_REDIS_URL"),
    reason="NETTRAIL_TEST_REDIS_URL not set (scripts/test-services starts redis-server as root)",
)
async def test_subscriptions_and_pushes_work_over_a_real_redis_channel_layer(session_cookie) -> None:
    layer = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [os.environ["NETTRAIL_TEST_REDIS_URL"]]},
        }
    }
    with override_settings(CHANNEL_LAYERS=layer):
        assert type(get_channel_layer()).__name__ == "RedisChannelLayer"
        comm = await connect(session_cookie, {"host": "redis-alpha", "kind": ["tcp_state"]})
        await batch(host_group("redis-alpha"), records("redis-alpha", 0, 4) + records("redis-alpha", 4, 1, "alert"))
        await batch(host_group("redis-beta"), records("redis-beta", 0, 4))
        message = await comm.receive_json_from(timeout=10)
        assert [r["seq"] for r in message["records"]] == [0, 1, 2, 3]
        assert await comm.receive_nothing(timeout=0.5)
        await comm.disconnect()
        await get_channel_layer().flush()


async def test_records_posted_to_ingest_reach_a_subscribed_browser(session_cookie) -> None:
    from asgiref.sync import sync_to_async

    from translators.records import to_json
    from webapp.traces.tokens import create_token

    comm = await connect(session_cookie, {"host": "ingest-host", "kind": ["tcp_state"]})
    _, token = await sync_to_async(create_token)("ingest-host")
    batch_body = b"[" + b",".join(to_json(r) for r in make_records(0, 5, host="ingest-host")) + b"]"
    answer = await sync_to_async(Client().post)(
        "/api/ingest", batch_body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert answer.status_code == 200, answer.content
    message = await comm.receive_json_from(timeout=10)
    assert [(r["kind"], r["seq"], r["state"]) for r in message["records"]] == [
        ("tcp_state", s, "ESTABLISHED") for s in range(5)
    ]
    await comm.disconnect()


async def test_a_refused_handshake_then_disconnect_is_handled_quietly() -> None:
    from webapp.traces.consumers import LiveConsumer

    app = LiveConsumer.as_asgi()
    comm = WebsocketCommunicator(app, "/ws/live/")
    comm.scope["user"] = None
    assert await comm.connect(timeout=10) == (False, CLOSE_UNAUTHENTICATED)
    await comm.send_input({"type": "websocket.disconnect", "code": 1006})  # what daphne sends next
    await comm.wait(timeout=1)  # the consumer ends without an exception


async def test_subscriptions_per_connection_are_bounded(session_cookie) -> None:
    from webapp.traces.consumers import MAX_TARGETS

    comm = await connect(session_cookie)
    for i in range(MAX_TARGETS):
        await comm.send_json_to({"subscribe": {"host": f"h{i}"}})
        message = await comm.receive_json_from(timeout=10)
        if message["type"] == "records":  # its unread replies reached the bound: asked to acknowledge
            assert message["records"] == []
            await comm.send_json_to({"ack": message["id"]})
            message = await comm.receive_json_from(timeout=10)
        assert message["type"] == "subscribed" and len(message["groups"]) == i + 1
    await comm.send_json_to({"subscribe": {"host": "one-too-many"}})
    assert await comm.receive_json_from(timeout=10) == {
        "type": "error",
        "error": f"at most {MAX_TARGETS} subscriptions per connection",
    }
    await comm.disconnect()

"""The ingest bus on a real Redis: ingest appends, a writer stores and acknowledges, a dead writer's entries are claimed.

Each test gets its own redis-server (tests/redis_server.py, AOF always).
"""
# ruff: noqa: F811 -- pytest fixtures imported from webapp_cast are redefined as test arguments

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from django.db import connection
from django.test import Client, override_settings
from redis_server import RedisServer
from webapp_cast import Cast, cast, drop, post, retransmit  # noqa: F401 (cast is a fixture)

from webapp.bus import streams
from webapp.bus.writer import Writer
from webapp.traces.models import KIND_MODELS, Connection, SkbDrop, TcpRetransmit

LossReport = KIND_MODELS["loss_report"]

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


@pytest.fixture
def bus() -> Iterator[redis.Redis]:
    server = RedisServer()
    server.start()
    streams.client.cache_clear()
    try:
        with override_settings(NETTRAIL_REDIS_URL=server.url):
            yield redis.Redis.from_url(server.url)
    finally:
        streams.client.cache_clear()
        server.close()


def test_ingest_appends_the_batch_and_a_writer_stores_then_acknowledges_it(cast: Cast, bus: redis.Redis) -> None:
    batch = [retransmit("host-a", 1), retransmit("host-a", 2), drop("host-a", 3)]
    resp = post(Client(), cast.token_a, batch)
    assert (resp.status_code, resp.json()) == (200, {"stored": 3, "duplicates": 0, "queued": True, "tracing": None})
    assert TcpRetransmit.objects.count() == 0  # only on the stream so far
    assert bus.xlen(streams.STREAM) == 1
    (entry_id, fields), *_ = bus.xrange(streams.STREAM)
    assert (fields[b"host"], fields[b"n"]) == (b"host-a", b"3")
    # On PostgreSQL the ingest tier queues the rows COPY-ready too (tests/test_pg_copy_ready.py).
    assert (b"copy" in fields) == (connection.vendor == "postgresql")

    writer = Writer(name="w1", block_ms=10)
    streams.ensure_group()
    assert writer.step() == 1
    assert list(TcpRetransmit.objects.order_by("seq").values_list("host_id", "seq")) == [("host-a", 1), ("host-a", 2)]
    assert list(SkbDrop.objects.values_list("seq", flat=True)) == [3]
    assert Connection.objects.get().retransmits == 2
    state = streams.status()
    assert (state.length, state.pending, state.lag, state.durability) == (0, 0, 0, "aof always")
    writer.publish()
    (stats,) = streams.status().writers
    assert (stats.name, stats.records, stats.batches, stats.duplicates, stats.pending) == ("w1", 3, 1, 0, 0)


def test_a_dead_writers_entry_is_claimed_and_its_committed_records_count_as_duplicates(
    cast: Cast, bus: redis.Redis
) -> None:
    post(Client(), cast.token_a, [retransmit("host-a", 1), retransmit("host-a", 2)])
    post(Client(), cast.token_a, [retransmit("host-a", 3)])
    streams.ensure_group()
    dead = Writer(name="dead", count=1)
    # The dead writer read the first entry and committed it, then died before XACK.
    ((_, entries),) = bus.xreadgroup(streams.GROUP, "dead", {streams.STREAM: ">"}, count=1)
    from translators.records import decode_batch
    from webapp.traces.store import store_batch

    assert store_batch(decode_batch(entries[0][1][b"body"], "msgpack")).stored == 2
    status = streams.status()
    assert (status.length, status.pending, status.lag) == (2, 1, 1)

    heir = Writer(name="heir", block_ms=10, claim_idle_ms=0, claim_every=0.0)
    assert heir.step() == 1  # the claim comes first
    assert (heir.records, heir.duplicates) == (0, 2)
    assert heir.step() == 1  # then the new entry
    assert heir.records == 1
    assert list(TcpRetransmit.objects.order_by("seq").values_list("seq", flat=True)) == [1, 2, 3]
    assert Connection.objects.get().retransmits == 3
    status = streams.status()
    assert (status.length, status.pending, status.lag) == (0, 0, 0)
    assert dead.records == 0


def test_a_restarted_writer_first_stores_its_own_pending_entries(cast: Cast, bus: redis.Redis) -> None:
    post(Client(), cast.token_a, [retransmit("host-a", 1)])
    streams.ensure_group()
    bus.xreadgroup(streams.GROUP, "w1", {streams.STREAM: ">"}, count=1)  # read, then killed before storing
    again = Writer(name="w1", block_ms=10)
    assert again.step() == 1
    assert list(TcpRetransmit.objects.values_list("seq", flat=True)) == [1]
    assert streams.status().pending == 0


def test_ingest_answers_503_when_redis_is_down(cast: Cast) -> None:
    server = RedisServer()  # never started: nothing listens on its port
    streams.client.cache_clear()
    try:
        with override_settings(NETTRAIL_REDIS_URL=server.url):
            resp = post(Client(), cast.token_a, [retransmit("host-a", 1)])
    finally:
        streams.client.cache_clear()
        server.close()
    assert resp.status_code == 503
    assert resp.json()["error"].startswith("ingest bus unavailable: ")
    assert TcpRetransmit.objects.count() == 0


def test_the_status_api_and_metrics_show_the_streams_backlog_and_each_writer(cast: Cast, bus: redis.Redis) -> None:
    post(Client(), cast.token_a, [retransmit("host-a", 1), retransmit("host-a", 2)])
    post(Client(), cast.token_a, [retransmit("host-a", 3)])
    streams.ensure_group()
    writer = Writer(name="w1", count=1, block_ms=10)
    writer.step()
    writer.publish()
    client = Client()
    client.force_login(cast.admin)
    bus_state = client.get("/api/dash/status").json()["bus"]
    (w1,) = bus_state.pop("writers")
    assert bus_state == {"length": 1, "pending": 0, "lag": 1, "durability": "aof always", "durable": True}
    assert (w1["name"], w1["records"], w1["batches"], w1["duplicates"], w1["pending"]) == ("w1", 2, 1, 0, 0)
    text = client.get("/metrics").content.decode()
    assert "nettrail_bus_length 1.0" in text
    assert "nettrail_bus_lag 1.0" in text
    assert "nettrail_bus_pending 0.0" in text
    assert "nettrail_bus_durable 1.0" in text
    assert 'nettrail_bus_writer_records_total{writer="w1"} 2.0' in text


def test_the_appliance_status_has_no_bus(cast: Cast) -> None:
    client = Client()
    client.force_login(cast.admin)
    assert client.get("/api/dash/status").json()["bus"] is None
    assert "nettrail_bus_" not in client.get("/metrics").content.decode()


def test_an_entry_that_cannot_be_stored_goes_to_the_refused_stream_and_is_acknowledged(
    cast: Cast, bus: redis.Redis
) -> None:
    streams.ensure_group()
    bus.xadd(streams.STREAM, {"host": "host-a", "n": 1, "body": b"\xc1"})  # 0xc1: never valid MessagePack
    writer = Writer(name="w1", block_ms=10)
    assert writer.step() == 1
    ((_, fields),) = bus.xrange("nettrail:ingest:refused")
    assert (fields[b"host"], fields[b"body"]) == (b"host-a", b"\xc1")
    assert fields[b"error"].startswith(b"MessagePack data is malformed")
    state = streams.status()
    assert (state.length, state.pending, writer.batches) == (0, 0, 0)
    # Lost to the database after ingest said 200: a loss report of the host says so.
    assert list(LossReport.objects.values_list("host_id", "hook", "event_type", "lost")) == [
        ("host-a", "writer/refused", "refused", 1)
    ]
    client = Client()
    client.force_login(cast.admin)
    losses = client.get("/api/dash/status", {"host": "host-a"}).json()["hosts"][0]["losses"]
    assert losses == [{"event_type": "refused", "lost": 1}]


def test_after_a_redis_restart_a_writer_pushes_its_recent_batches_again(
    cast: Cast, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A push Redis accepted can miss the browser in a restart with nothing after it to show
    the jump (tests/test_scale_out.py once saw 60 records never arrive and no gap). The writer
    notices the restart (Redis's run_id changed, or a failed call) and pushes the batches of
    the seconds before it again, on the real channel layer, with offsets that continue."""
    import asyncio

    from webapp.bus.layer import ResilientRedisChannelLayer
    from webapp.traces import push

    server = RedisServer()
    server.start()
    streams.client.cache_clear()
    layer = ResilientRedisChannelLayer(hosts=[server.url])
    monkeypatch.setattr(push, "get_channel_layer", lambda: layer)
    monkeypatch.setattr(push, "_offsets", type(push._offsets)())
    group = push.group_name("host", "host-a")

    loop = asyncio.new_event_loop()  # the receiving side's: channels_redis keeps its buffers per loop

    def message(channel: str) -> tuple[int, list[int]]:
        got = loop.run_until_complete(asyncio.wait_for(layer.receive(channel), 10))
        return got["offset"], [rec["seq"] for rec in got["records"]]

    try:
        with override_settings(NETTRAIL_REDIS_URL=server.url):
            channel = loop.run_until_complete(layer.new_channel())
            loop.run_until_complete(layer.group_add(group, channel))
            writer = Writer(name="w1", block_ms=10)
            streams.ensure_group()
            writer.publish()  # its first look at Redis's run_id
            post(Client(), cast.token_a, [retransmit("host-a", 1), retransmit("host-a", 2)])
            assert writer.step() == 1
            assert message(channel) == (0, [1, 2])  # delivered here; in a real restart it may not be
            server.restart()  # AOF: the stream, the group and the membership are back
            writer.publish()
            post(Client(), cast.token_a, [retransmit("host-a", 3)])
            assert writer.step() == 1
            # the batch before the restart again, then the new one: offsets without a jump
            assert [message(channel), message(channel)] == [(2, [1, 2]), (4, [3])]
            assert list(TcpRetransmit.objects.order_by("seq").values_list("seq", flat=True)) == [1, 2, 3]
    finally:
        loop.run_until_complete(layer.flush())
        loop.close()
        streams.client.cache_clear()
        server.close()


def test_recent_pushes_keep_the_window_before_a_failure_within_their_byte_bound() -> None:
    from webapp.bus.recent_pushes import RecentPushes

    recent = RecentPushes(window_s=10.0, max_bytes=30)
    for at, body in [(0.0, b"a" * 10), (5.0, b"b" * 10), (12.0, b"c" * 10)]:
        recent.add(at, body)
    assert recent.before(13.0) == ([b"b" * 10, b"c" * 10], False)  # 0.0 is older than the window
    recent.add(14.0, b"d" * 10)  # over 30 bytes: the oldest goes
    assert recent.before(13.0) == ([b"b" * 10, b"c" * 10, b"d" * 10], False)
    recent.add(15.0, b"e" * 10)  # b (5.0) dropped for bytes: inside the window of a failure at 13
    assert recent.before(13.0) == ([b"c" * 10, b"d" * 10, b"e" * 10], True)
    recent.add(40.0, b"f")  # two windows on, the rest aged out
    assert recent.before(40.0) == ([b"f"], False)

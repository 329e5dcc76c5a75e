"""A strict live push (the scale-out writer's) that fails while Redis is away takes its offsets back.

Real Redis (tests/redis_server.py) behind the channel layer the scale-out uses
(webapp/bus/layer.py), one channel subscribed to a host's group. A strict push
while Redis is stopped raises PushFailed and leaves the group's offset where it
was, so the retry after Redis is back continues the sequence: the subscriber sees
no jump (no gap) and gets the records. A plain push (the appliance's ingest) in
the same situation keeps the offsets moved on: the next message jumps, and the
consumer reports the records as missed.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from redis_server import RedisServer

from translators import records as r
from webapp.bus.layer import ResilientRedisChannelLayer
from webapp.traces import push

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
HOST = "retry-host"
GROUP = push.group_name("host", HOST)


def records(start: int, count: int) -> list[r.SkbDrop]:
    return [
        r.SkbDrop(
            host_id=HOST, boot_id="b", seq=seq, ts_ns=seq, ts_wall=1000.0 + seq,
            provider="skb", probe="m-free", drop_reason=2, drop_reason_str="NO_SOCKET",
        )
        for seq in range(start, start + count)
    ]  # fmt: skip


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    redis_server = RedisServer()
    redis_server.start()
    monkeypatch.setattr(push, "_offsets", type(push._offsets)())
    try:
        yield redis_server
    finally:
        redis_server.close()


def run(server: RedisServer, monkeypatch: pytest.MonkeyPatch, steps: Any) -> list[tuple[int, list[int]]]:
    """steps(push, stop, start) runs in a thread; what the subscribed channel got, in order, until seq 6."""
    channel_layer = ResilientRedisChannelLayer(hosts=[server.url])
    monkeypatch.setattr(push, "get_channel_layer", lambda: channel_layer)

    async def scenario() -> list[tuple[int, list[int]]]:
        channel = await channel_layer.new_channel()
        await channel_layer.group_add(GROUP, channel)
        await sync_to_async(steps, thread_sensitive=False)()
        got: list[tuple[int, list[int]]] = []
        while not got or 6 not in got[-1][1]:
            assert len(got) < 6, got
            message = await channel_layer.receive(channel)
            got.append((message["offset"], [rec["seq"] for rec in message["records"]]))
        await channel_layer.flush()
        return got

    return async_to_sync(scenario)()


def test_a_failed_strict_push_takes_its_offsets_back_and_the_retry_continues_the_sequence(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed: list[int] = []

    def steps() -> None:
        push.push(records(1, 3), strict=True)
        server.stop()
        with pytest.raises(push.PushFailed):
            push.push(records(4, 2), strict=True)
        failed.append(push._offsets[GROUP])
        server.start()  # same port and AOF: the queued message and the group membership are back
        push.push(records(4, 3), strict=True)  # the writer's retry of its pending entry (and one more)

    got = run(server, monkeypatch, steps)
    assert failed == [3]  # taken back: those records were not sent
    assert got == [(0, [1, 2, 3]), (3, [4, 5, 6])]  # 3 follows 0 + 3: no gap, every record


def test_a_failed_plain_push_keeps_its_offsets_so_the_subscriber_sees_the_gap(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def steps() -> None:
        push.push(records(1, 3))
        server.stop()
        push.push(records(4, 2))  # logged, not raised
        server.start()
        push.push(records(6, 1))

    got = run(server, monkeypatch, steps)
    assert got == [(0, [1, 2, 3]), (5, [6])]  # the consumer expected 3: it counts 2 records missed

"""What one live websocket client makes the server hold is bounded in bytes (issue #33
item 4): unacknowledged records messages stay within NETTRAIL_LIVE_WINDOW_BYTES, its
buffer overflows at NETTRAIL_LIVE_MAX_BUFFER_BYTES as it does at its record count, and
replies to a client that reads nothing wait (subscribed) or drop it (errors) past the
window plus CONTROL_BYTES. Real Channels stack; the honest client still gets everything."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings
from live_ws import BIG_LAYER, batch, connect, login_cookie, records

from webapp.traces.consumers import CLOSE_TOO_SLOW, CONTROL_BYTES, host_group

pytestmark = pytest.mark.django_db(transaction=True)
WINDOW_BYTES = 64 << 10
PAD = 900  # ~1 KB records


@override_settings(CHANNEL_LAYERS=BIG_LAYER, NETTRAIL_LIVE_WINDOW=100, NETTRAIL_LIVE_WINDOW_BYTES=WINDOW_BYTES)
async def test_unacknowledged_records_stay_within_the_byte_window_and_all_arrive_once_acknowledged() -> None:
    comm = await connect(await login_cookie("reader"), {"host": "alpha"})
    for start in range(0, 300, 100):
        await batch(host_group("alpha"), records("alpha", start, 100, pad=PAD))
    raw = await comm.receive_from(timeout=10)
    first = json.loads(raw)
    assert len(raw) <= WINDOW_BYTES and len(first["records"]) < 300
    assert await comm.receive_nothing(timeout=0.5)  # a window of 100 messages, but of bytes one is full
    seqs = [r["seq"] for r in first["records"]]
    await comm.send_json_to({"ack": first["id"]})
    while len(seqs) < 300:
        raw = await comm.receive_from(timeout=10)
        assert len(raw) <= WINDOW_BYTES
        message = json.loads(raw)
        seqs.extend(r["seq"] for r in message["records"])
        await comm.send_json_to({"ack": message["id"]})
    assert seqs == list(range(300))
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


@override_settings(
    CHANNEL_LAYERS=BIG_LAYER,
    NETTRAIL_LIVE_WINDOW_BYTES=WINDOW_BYTES,
    NETTRAIL_LIVE_MAX_BUFFER=1_000_000,
    NETTRAIL_LIVE_MAX_BUFFER_BYTES=256 << 10,
    NETTRAIL_LIVE_STALL_SECONDS=0.2,
)
async def test_a_buffer_over_its_bytes_overflows_and_the_client_is_told_its_exact_gap() -> None:
    comm = await connect(await login_cookie("stalled"), {"host": "alpha"})
    for start in range(0, 1000, 100):  # ~1 MB: far more than 256 KiB, far fewer than 1,000,000 records
        await batch(host_group("alpha"), records("alpha", start, 100, pad=PAD))
    delivered = 0
    while True:
        message = await comm.receive_json_from(timeout=10)
        if message["type"] != "records":
            break
        delivered += len(message["records"])  # never acknowledged
    assert message == {"type": "gap", "missed": 1000 - delivered, "dropped": True}
    assert delivered < 100
    assert await comm.receive_output(timeout=10) == {"type": "websocket.close", "code": CLOSE_TOO_SLOW}


async def subscribe_many_unread(comm, hosts: list[str]) -> list[dict]:
    """Subscribes to each host without reading a reply; then every message it was sent."""
    for host in hosts:
        await comm.send_json_to({"subscribe": {"host": host}})
    got = []
    while not await comm.receive_nothing(timeout=0.5):
        got.append(await comm.receive_json_from(timeout=10))
    return got


@override_settings(NETTRAIL_LIVE_WINDOW_BYTES=WINDOW_BYTES)
async def test_subscribe_replies_to_a_client_that_reads_nothing_wait_and_only_the_newest_is_kept() -> None:
    comm = await connect(await login_cookie("subscriber"))
    hosts = [f"{i:04d}" + "h" * 90 for i in range(300)]  # each reply lists every group: ~100 bytes more each
    got = await subscribe_many_unread(comm, hosts)
    probe = got.pop()
    assert probe["type"] == "records" and probe["records"] == []  # asked to acknowledge what it read
    assert [len(m["groups"]) for m in got] == list(range(1, len(got) + 1))
    assert sum(len(json.dumps(m, separators=(",", ":"))) for m in got) <= WINDOW_BYTES + CONTROL_BYTES
    assert len(got) < 300
    await comm.send_json_to({"ack": probe["id"]})
    newest = await comm.receive_json_from(timeout=10)
    assert newest == {"type": "subscribed", "groups": sorted(f"host.{h}" for h in hosts)}
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


@override_settings(NETTRAIL_LIVE_WINDOW_BYTES=WINDOW_BYTES)
async def test_a_client_that_reads_nothing_and_sends_bad_messages_is_dropped_as_too_slow() -> None:
    comm = await connect(await login_cookie("noisy"))
    got = await subscribe_many_unread(comm, [f"{i:04d}" + "h" * 90 for i in range(300)])
    assert got[-1]["type"] == "records"  # its unread bytes are near the bound
    replies = sum(len(json.dumps(m, separators=(",", ":"))) for m in got)
    for _ in range(1000):  # each error is ~50 bytes: far more than the room left
        await comm.send_json_to({"subscribe": {"host": "x", "kind": ["no-such-kind"]}})
    errors = 0
    while (message := await comm.receive_json_from(timeout=10))["type"] == "error":
        assert message == {"type": "error", "error": "unknown record kind 'no-such-kind'"}
        errors += 1
        replies += len(json.dumps(message, separators=(",", ":")))
    assert message == {"type": "gap", "missed": 0, "dropped": True}
    assert await comm.receive_output(timeout=10) == {"type": "websocket.close", "code": CLOSE_TOO_SLOW}
    assert errors < 1000 and replies <= WINDOW_BYTES + CONTROL_BYTES
    assert await comm.receive_nothing(timeout=0.3)


async def test_an_error_quotes_at_most_64_characters_of_the_bad_value() -> None:
    comm = await connect(await login_cookie("verbose"))
    await comm.send_json_to({"subscribe": {"host": "x", "kind": ["k" * 100_000]}})
    assert await comm.receive_json_from(timeout=10) == {
        "type": "error",
        "error": "unknown record kind '" + "k" * 64 + "...'",
    }
    await comm.send_json_to({"subscribe": {"y" * 100_000: 1}})
    assert await comm.receive_json_from(timeout=10) == {
        "type": "error",
        "error": "unknown subscription key '" + "y" * 64 + "...'",
    }
    await comm.disconnect()

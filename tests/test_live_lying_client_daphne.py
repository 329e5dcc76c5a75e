"""A websocket client that acknowledges without reading cannot grow the server (issue #33
item 4), under a real daphne: while batches are ingested, a client with a 4 KiB receive
buffer that never reads and sends ``{"ack": 10**12}`` every 0.1 s is closed (4400), a
client that never reads nor acknowledges stays within its byte bounds, and the server's
resident memory stays flat; a reading client still gets every record.

The server is the real webapp (tests/daphne_server.py) with small byte limits, so what a
client may make it hold is small next to what the ingested batches would have piled up
in daphne for the liar without the fix (~600 bytes a record, 150,000 records).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import websockets
from daphne_server import Server, running_webapp
from ingest_stub import make_records
from raw_ws import RawClient
from websockets.frames import Opcode

from translators.records import to_json

HOST = "liar-host"
BATCH = 1000
WARMUP_BATCHES = 40
BATCHES = 150
WINDOW_BYTES = 1 << 20
MAX_BUFFER_BYTES = 8 << 20
CONTROL_BYTES = 1 << 20  # webapp.traces.consumers.CONTROL_BYTES
# What the two misbehaving clients may make the server hold (each: unread bytes in
# daphne, its buffer), plus slack for the allocator and the ingest path. Without the
# fix the liar alone piles up ~90 MB.
RSS_BOUND = 2 * (WINDOW_BYTES + CONTROL_BYTES + MAX_BUFFER_BYTES) + (24 << 20)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    env = {
        "NETTRAIL_LIVE_WINDOW_BYTES": str(WINDOW_BYTES),
        "NETTRAIL_LIVE_MAX_BUFFER_BYTES": str(MAX_BUFFER_BYTES),
        "NETTRAIL_LIVE_STALL_SECONDS": "600",  # the stalled client stays connected through the test
    }
    with running_webapp(env, prefix="nettrail-liar-", host=HOST) as srv:
        yield srv


def rss(pid: int) -> int:
    """The process's resident anonymous memory in bytes (file pages, e.g. SQLite's mmap, left out)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/PID/status")


def post_batches(srv: Server, first: int, count: int) -> None:
    for n in range(first, first + count):
        body = b"[" + b",".join(to_json(r) for r in make_records(n * BATCH, BATCH, host=HOST)) + b"]"
        answer = requests.post(
            f"{srv.url}/api/ingest",
            data=body,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {srv.token}"},
            timeout=120,
        )
        assert answer.status_code == 200, answer.text


async def read_until(ws: Any, want: int, seqs: list[int]) -> None:
    """Records messages' seqs until `want`, acknowledging each; any other message fails."""
    while len(seqs) < want:
        message = json.loads(await asyncio.wait_for(ws.recv(), timeout=120))
        assert message["type"] == "records", message
        seqs.extend(r["seq"] for r in message["records"])
        await ws.send(json.dumps({"ack": message["id"]}))


def lie(client: RawClient, stop: threading.Event) -> None:
    """The issue's client: acknowledges far beyond anything sent, every 0.1 s, never reads."""
    while not stop.wait(0.1):
        if not client.send_json({"ack": 10**12}):
            return


async def test_a_client_acknowledging_without_reading_is_closed_and_the_server_stays_flat(server: Server) -> None:
    cookie = server.session_cookie()
    subscribe = {"subscribe": {"host": HOST, "kind": ["tcp_state"]}}
    reader = await websockets.connect(
        f"ws://127.0.0.1:{server.port}/ws/live/", additional_headers={"Cookie": cookie, "Origin": server.url}
    )
    await reader.send(json.dumps(subscribe))
    assert json.loads(await reader.recv())["type"] == "subscribed"
    seqs: list[int] = []
    posting = asyncio.ensure_future(asyncio.to_thread(post_batches, server, 0, WARMUP_BATCHES))
    await read_until(reader, WARMUP_BATCHES * BATCH, seqs)
    await posting
    before = rss(server.pid)

    liar = RawClient(server.port, cookie, server.url)
    stalled = RawClient(server.port, cookie, server.url)
    for client in (liar, stalled):
        assert client.send_json(subscribe)
    stop = threading.Event()
    lying = threading.Thread(target=lie, args=(liar, stop))
    lying.start()
    try:
        posting = asyncio.ensure_future(asyncio.to_thread(post_batches, server, WARMUP_BATCHES, BATCHES))
        peak = before
        want = (WARMUP_BATCHES + BATCHES) * BATCH
        while len(seqs) < want:  # the reader keeps up; memory is sampled as it goes
            await read_until(reader, min(want, len(seqs) + 10 * BATCH), seqs)
            peak = max(peak, rss(server.pid))
        await posting
        peak = max(peak, rss(server.pid))
    finally:
        stop.set()
        lying.join()
    print(f"RssAnon after warm-up {before >> 20} MiB, peak {peak >> 20} MiB (bound +{RSS_BOUND >> 20} MiB)")
    assert seqs == list(range(want))  # the honest client got everything, in order, no gap
    assert peak - before <= RSS_BOUND

    # The liar was closed: its first lying ack got an error and the close, 4400, and the
    # server then dropped the connection it did not read (or it reads them now). On a busy
    # machine the drop can come before the error and the close frame reached the client's
    # buffer (one CI run: only "subscribed", then the server's FIN): the connection ended
    # all the same, which drain() sees as EOF; still connected, drain() would time out.
    got = await asyncio.to_thread(liar.drain)
    if not got.reset:  # a reset may discard what the client had not read
        assert got.messages and got.messages[0]["type"] == "subscribed", got
    if got.close_code is not None:
        assert got.close_code == 4400, got
        assert got.messages[-1] == {"type": "error", "error": "ack names no records message sent on this socket"}
    records = [r["seq"] for m in got.messages if m["type"] == "records" for r in m["records"]]
    assert len(records) * 600 <= WINDOW_BYTES + (64 << 10)  # at most its window before the lie

    # The stalled client is still connected, holding at most its window: when it reads
    # and acknowledges, it gets a prefix of the records, then its exact gap.
    stalled.sock.settimeout(60)
    delivered: list[int] = []
    gap: dict[str, Any] | None = None
    while gap is None:
        data = await asyncio.to_thread(stalled.sock.recv, 1 << 16)
        assert data, "the stalled client was disconnected before its gap"
        stalled.proto.receive_data(data)
        for frame in stalled.proto.events_received():
            if frame.opcode is not Opcode.TEXT:
                continue
            message = json.loads(frame.data)
            if message["type"] == "records":
                delivered.extend(r["seq"] for r in message["records"])
                stalled.send_json({"ack": message["id"]})
            elif message["type"] == "gap":
                gap = message
    assert delivered == list(range(WARMUP_BATCHES * BATCH, WARMUP_BATCHES * BATCH + len(delivered)))
    assert gap == {"type": "gap", "missed": BATCHES * BATCH - len(delivered), "dropped": True}
    assert (await asyncio.to_thread(stalled.drain)).close_code == 4008
    for client in (liar, stalled):
        client.close()
    await reader.close()

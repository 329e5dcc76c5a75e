"""The live websocket under a real daphne with real websocket clients: a 100,000-record burst
posted to /api/ingest reaches a reading browser whole, and a stalled one is told exactly how
many records it missed, after at most its window of messages (its queue is bounded).

The server is the real webapp (tests/daphne_server.py) on a free port with its own
NETTRAIL_DATA; the clients are `websockets` clients
with their default 1 MiB message limit, which is daphne's frame limit too: an oversized
message would close them with 1009.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import websockets
from daphne_server import Server, running_webapp
from ingest_stub import make_records

from translators.records import to_json

HOST = "burst-host"
BURST = 100_000
BATCH = 5000
WINDOW = 4
MAX_BUFFER = 50_000
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    env = {
        "NETTRAIL_LIVE_WINDOW": str(WINDOW),
        "NETTRAIL_LIVE_MAX_BUFFER": str(MAX_BUFFER),
        # Longer than the test: the stalled client is told when it reads again, so its
        # count covers the whole burst.
        "NETTRAIL_LIVE_STALL_SECONDS": "600",
    }
    with running_webapp(env, prefix="nettrail-live-", host=HOST) as srv:
        yield srv


async def subscribed(srv: Server, cookie: str) -> Any:
    ws = await websockets.connect(
        f"ws://127.0.0.1:{srv.port}/ws/live/",
        additional_headers={"Cookie": cookie, "Origin": srv.url},
    )
    await ws.send(json.dumps({"subscribe": {"host": HOST, "kind": ["tcp_state"]}}))
    assert json.loads(await ws.recv())["type"] == "subscribed"
    return ws


def post_burst(srv: Server) -> None:
    for start in range(0, BURST, BATCH):
        body = b"[" + b",".join(to_json(r) for r in make_records(start, BATCH, host=HOST)) + b"]"
        answer = requests.post(
            f"{srv.url}/api/ingest",
            data=body,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {srv.token}"},
            timeout=120,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"stored": BATCH, "duplicates": 0, "tracing": None}


async def read_all(ws: Any, want: int) -> tuple[list[int], list[dict[str, Any]]]:
    """Records messages' seqs until `want` seqs or a gap; acknowledges each message."""
    seqs: list[int] = []
    others: list[dict[str, Any]] = []
    while len(seqs) < want:
        message = json.loads(await asyncio.wait_for(ws.recv(), timeout=60))
        if message["type"] != "records":
            others.append(message)
            if message["type"] == "gap":
                break
            continue
        seqs.extend(r["seq"] for r in message["records"])
        await ws.send(json.dumps({"ack": message["id"]}))
    return seqs, others


async def test_a_burst_reaches_a_reading_client_whole_and_a_stalled_one_is_told_its_exact_gap(server: Server) -> None:
    cookie = server.session_cookie()
    reader = await subscribed(server, cookie)
    stalled = await subscribed(server, cookie)  # reads nothing until the burst is over
    posting = asyncio.ensure_future(asyncio.to_thread(post_burst, server))
    seqs, others = await read_all(reader, BURST)
    await posting
    assert seqs == list(range(BURST))
    assert others == []  # no gap: nothing was missed

    # The stalled client was sent at most its window of messages, each under 1 MiB (its
    # client would have closed with 1009 otherwise); everything after that was counted,
    # not queued, and it is told the exact number once it reads and acknowledges again.
    messages = 0
    got: list[int] = []
    gap: dict[str, Any] | None = None
    while gap is None:
        raw = await asyncio.wait_for(stalled.recv(), timeout=60)
        assert len(raw.encode()) < 1 << 20
        message = json.loads(raw)
        if message["type"] == "gap":
            gap = message
            break
        assert message["type"] == "records"
        messages += 1
        got.extend(r["seq"] for r in message["records"])
        await stalled.send(json.dumps({"ack": message["id"]}))
    assert messages <= WINDOW
    assert got == list(range(len(got)))
    assert gap == {"type": "gap", "missed": BURST - len(got), "dropped": True}
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await asyncio.wait_for(stalled.recv(), timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4008
    await reader.close()

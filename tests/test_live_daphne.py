"""The live websocket under a real daphne with real websocket clients: a 100,000-record burst
posted to /api/ingest reaches a reading browser whole, and a stalled one is told exactly how
many records it missed, after at most its window of messages (its queue is bounded).

The server is `daphne webapp.asgi:application` as the test's own user on a free port with
its own NETTRAIL_DATA (as in test_sink_spool_e2e.py); the clients are `websockets` clients
with their default 1 MiB message limit, which is daphne's frame limit too: an oversized
message would close them with 1009.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import websockets
from ingest_stub import make_records

from translators.records import to_json

REPO = Path(__file__).resolve().parent.parent
HOST = "burst-host"
BURST = 100_000
BATCH = 5000
WINDOW = 4
MAX_BUFFER = 50_000
pytestmark = pytest.mark.slow


class Daphne:
    def __init__(self, data: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.env = {
            **os.environ,
            "NETTRAIL_DATA": str(data),
            "DJANGO_SETTINGS_MODULE": "webapp.settings",
            "NETTRAIL_TRIM_INTERVAL": "0",
            "NETTRAIL_LIVE_WINDOW": str(WINDOW),
            "NETTRAIL_LIVE_MAX_BUFFER": str(MAX_BUFFER),
            # Longer than the test: the stalled client is told when it reads again, so its
            # count covers the whole burst.
            "NETTRAIL_LIVE_STALL_SECONDS": "600",
            "DJANGO_SUPERUSER_PASSWORD": "burst-password-1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        for name in ("DATABASE_URL", "CHANNEL_LAYER"):
            self.env.pop(name, None)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def run(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, *args], cwd=REPO, env=self.env, capture_output=True, text=True, timeout=120, check=True
        )
        return done.stdout

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "webapp.asgi:application"],
            cwd=REPO, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.1).close()
                return
            except OSError:
                assert self.proc.poll() is None, "daphne exited during start-up"
                time.sleep(0.05)
        raise AssertionError("daphne did not start listening within 15 s")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
            self.proc = None


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daphne]:
    srv = Daphne(tmp_path_factory.mktemp("nettrail-live"))
    srv.token = srv.run("-m", "nettrail.cli", "token", "create", HOST).strip()  # type: ignore[attr-defined]
    srv.run("manage.py", "createsuperuser", "--noinput", "--username", "viewer", "--email", "v@example.org")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def session_cookie(srv: Daphne) -> str:
    http = requests.Session()
    http.get(f"{srv.url}/accounts/login/", timeout=10)
    answer = http.post(
        f"{srv.url}/accounts/login/",
        data={"username": "viewer", "password": "burst-password-1", "csrfmiddlewaretoken": http.cookies["csrftoken"]},
        headers={"Referer": f"{srv.url}/accounts/login/"},
        timeout=10,
        allow_redirects=False,
    )
    assert answer.status_code == 302, answer.text[:300]
    return f"sessionid={http.cookies['sessionid']}"


async def subscribed(srv: Daphne, cookie: str) -> Any:
    ws = await websockets.connect(
        f"ws://127.0.0.1:{srv.port}/ws/live/",
        additional_headers={"Cookie": cookie, "Origin": srv.url},
    )
    await ws.send(json.dumps({"subscribe": {"host": HOST, "kind": ["tcp_state"]}}))
    assert json.loads(await ws.recv())["type"] == "subscribed"
    return ws


def post_burst(srv: Daphne) -> None:
    for start in range(0, BURST, BATCH):
        body = b"[" + b",".join(to_json(r) for r in make_records(start, BATCH, host=HOST)) + b"]"
        answer = requests.post(
            f"{srv.url}/api/ingest",
            data=body,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {srv.token}"},  # type: ignore[attr-defined]
            timeout=120,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"stored": BATCH, "duplicates": 0}


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


async def test_a_burst_reaches_a_reading_client_whole_and_a_stalled_one_is_told_its_exact_gap(server: Daphne) -> None:
    cookie = session_cookie(server)
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

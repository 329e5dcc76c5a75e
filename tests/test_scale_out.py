"""Load and fault test of the scale-out deployment (issue 19 item 5), on a real Redis and PostgreSQL.

`nettrail serve --workers 2 --writers 2` against a Redis started here (AOF
always) and a fresh PostgreSQL database; 20 simulated hosts, each with its own
token, POST their records concurrently, resending a batch until it is answered
200 (the collector spool's contract). During the run one writer and one ingest
worker are killed with SIGKILL (the cluster starts them again) and Redis is
killed with SIGKILL once and started again on its AOF. At the end every record is stored exactly once (count and
sequence per host), nothing is pending, and a live websocket client subscribed to
every host saw every record, with no gap announced: a push that fails while Redis
restarts keeps the writer's entry pending and is sent again (webapp/bus/writer.py).

The worker killed is the one not holding the websocket: a browser whose server
dies must reconnect, and the live view has no replay of what it missed.
Needs root-free ports on loopback, redis-server, and NETTRAIL_TEST_POSTGRES_URL
(`. scripts/test-services`).
"""
# ruff: noqa: F811 -- the database fixture imported from scale_out_db is redefined as a test argument

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
import psutil
import pytest
import redis
import requests
from redis_server import RedisServer, free_port
from scale_out_db import PG_URL, database  # noqa: F401 (database is a fixture)

from translators import records as r

REPO = Path(__file__).resolve().parent.parent
HOSTS = [f"load-{i:02d}" for i in range(20)]
PER_HOST = 1200
BATCH = 60  # 20 batches per host
PAUSE = 0.2  # seconds between a host's batches: the run lasts long enough to hurt it
DEADLINE = 420.0  # seconds for the whole test
TABLES = ("traces_tcpretransmit", "traces_skbdrop")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not PG_URL, reason="needs NETTRAIL_TEST_POSTGRES_URL (. scripts/test-services)"),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]


def host_records(host: str, start: float) -> list[Any]:
    out: list[Any] = []
    for seq in range(1, PER_HOST + 1):
        env = {"host_id": host, "boot_id": "boot-1", "seq": seq, "ts_ns": seq * 1000, "ts_wall": start + seq / 1000}
        if seq % 4:
            out.append(r.TcpRetransmit(**env, conn_uuid=f"{host}-c{seq % 7}", provider="tcp", probe="retransmit"))
        else:
            out.append(r.SkbDrop(**env, provider="skb", probe="m-free", drop_reason=2, drop_reason_str="NO_SOCKET"))
    return out


class Run:
    """The cluster under test and what the clients saw."""

    def __init__(self, redis_server: RedisServer, database_url: str) -> None:
        self.redis = redis_server
        self.port = free_port()
        self.data = Path(tempfile.mkdtemp(prefix="nettrail-scale-"))
        self.data.chmod(0o755)  # the children run as the nettrail user
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_server.url,
            "NETTRAIL_DATA": str(self.data / "data"),
            "NETTRAIL_TRIM_INTERVAL": "0",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        self.env.pop("CHANNEL_LAYER", None)
        self.proc: subprocess.Popen[bytes] | None = None
        self.sent_batches = 0
        self.lock = threading.Lock()
        self.seen: set[tuple[str, int]] = set()
        self.missed = 0  # records the server said this client will not get (gap messages)
        self.ws_error: str | None = None
        self.ws_port = 0

    def setup(self) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, str(REPO / "tests" / "scale_out_setup.py"), *HOSTS],
            cwd=REPO, env=self.env, capture_output=True, text=True, timeout=180, check=True,
        )  # fmt: skip
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    def start(self) -> None:
        command = [sys.executable, "-m", "nettrail.cli", "serve", "--port", str(self.port)]
        command += ["--workers", "2", "--writers", "2"]
        log = (self.data / "serve.log").open("wb")
        self.proc = subprocess.Popen(command, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.data / "serve.log").read_text()
            if len(self.children("webapp.serve")) == 2 and len(self.children("writer_main")) == 2:
                try:
                    if requests.get(self.url("/accounts/login/"), timeout=2).status_code == 200:
                        return
                except requests.RequestException:
                    pass
            time.sleep(0.3)
        raise AssertionError("the cluster did not start:\n" + (self.data / "serve.log").read_text())

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def children(self, marker: str) -> list[psutil.Process]:
        assert self.proc is not None
        found = []
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                if any(marker in part for part in child.cmdline()):
                    found.append(child)
            except psutil.NoSuchProcess:
                pass
        return found

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:  # it exited already (its own error is in its log)
            children = []
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for child in children:  # by PID: whatever the cluster did not stop
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        self.proc = None

    # --- clients ---------------------------------------------------------------------------------

    def send(self, host: str, token: str, stop_at: float) -> None:
        recs = host_records(host, time.time())
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/msgpack"}
        session = requests.Session()
        for start in range(0, PER_HOST, BATCH):
            body = msgspec.msgpack.encode(recs[start : start + BATCH])
            while True:  # the spool's contract: resend until the server answers 200
                assert time.monotonic() < stop_at, f"{host}: batch at {start} not accepted in time"
                try:
                    if session.post(self.url("/api/ingest"), data=body, headers=headers, timeout=10).status_code == 200:
                        break
                except requests.RequestException:
                    session = requests.Session()
                time.sleep(0.2)
            with self.lock:
                self.sent_batches += 1
            time.sleep(PAUSE)

    def watch(self, session_key: str, ready: threading.Event, stop: threading.Event) -> None:
        from websockets.sync.client import connect

        headers = {"Cookie": f"sessionid={session_key}", "Origin": f"http://127.0.0.1:{self.port}"}
        try:
            with connect(f"ws://127.0.0.1:{self.port}/ws/live/", additional_headers=headers) as ws:
                self.ws_port = ws.socket.getsockname()[1]
                for host in HOSTS:
                    ws.send(json.dumps({"subscribe": {"host": host}}))
                    assert json.loads(ws.recv(timeout=30))["type"] == "subscribed"
                ready.set()
                while not stop.is_set():
                    try:
                        message = json.loads(ws.recv(timeout=0.5))
                    except TimeoutError:
                        continue
                    if message.get("type") == "records":
                        with self.lock:
                            self.seen.update((rec["host_id"], rec["seq"]) for rec in message["records"])
                        ws.send(json.dumps({"ack": message["id"]}))  # flow control is mandatory (docs/api.md)
                    elif message.get("type") == "gap":
                        if message.get("dropped"):  # the client itself was dropped: a failure here
                            raise AssertionError(f"live client dropped: {message}")
                        with self.lock:  # pushes the channel layer lost (a Redis restart), counted
                            self.missed += int(message["missed"])
        except Exception as exc:  # reported by the test, with what was seen until then
            self.ws_error = f"{type(exc).__name__}: {exc}"
            ready.set()

    def worker_without_websocket(self) -> psutil.Process:
        for worker in self.children("webapp.serve"):
            ports = {c.raddr.port for c in worker.net_connections(kind="tcp") if c.raddr}
            if self.ws_port not in ports:
                return worker
        raise AssertionError("both workers hold the websocket?")


def test_twenty_hosts_through_two_workers_and_two_writers_survive_kills_and_a_redis_restart(database: str) -> None:
    started = time.monotonic()
    server = RedisServer()
    server.start()
    run = Run(server, database)
    try:
        ids = run.setup()
        run.start()
        ready, stop_watch = threading.Event(), threading.Event()
        watcher = threading.Thread(target=run.watch, args=(ids["session"], ready, stop_watch), daemon=True)
        watcher.start()
        assert ready.wait(60) and run.ws_error is None, run.ws_error
        stop_at = started + DEADLINE - 60
        senders = [
            threading.Thread(target=run.send, args=(host, ids["tokens"][host], stop_at), daemon=True) for host in HOSTS
        ]
        for sender in senders:
            sender.start()
        total = len(HOSTS) * PER_HOST // BATCH
        faults = [
            (0.25, lambda: os.kill(_slot(run, "writer-0").pid, signal.SIGKILL)),
            (0.45, lambda: os.kill(run.worker_without_websocket().pid, signal.SIGKILL)),
            (0.65, lambda: (server.kill(), server.start())),  # a crash: SIGKILL by PID, no flush
        ]
        for share, fault in faults:
            while run.sent_batches < share * total and any(s.is_alive() for s in senders):
                time.sleep(0.05)
            fault()
        for sender in senders:
            sender.join(timeout=max(1.0, stop_at - time.monotonic()))
            assert not sender.is_alive(), "a host could not deliver its records in time"

        expected = {(host, seq) for host in HOSTS for seq in range(1, PER_HOST + 1)}
        client = redis.Redis.from_url(server.url)
        settled = started + DEADLINE - 10
        while time.monotonic() < settled:
            (group,) = client.xinfo_groups("nettrail:ingest")
            with run.lock:
                seen_all = expected <= run.seen
            if group["pending"] == 0 and group["lag"] == 0 and client.xlen("nettrail:ingest") == 0 and seen_all:
                break
            time.sleep(0.5)
        stop_watch.set()
        watcher.join(timeout=10)

        (group,) = client.xinfo_groups("nettrail:ingest")
        assert (group["pending"], group["lag"], client.xlen("nettrail:ingest")) == (0, 0, 0)
        assert _stored_per_host(database) == {host: (PER_HOST, PER_HOST, 1, PER_HOST) for host in HOSTS}
        assert run.ws_error is None, run.ws_error
        # The live client saw every record (some twice: pushes are at least once), and was never told of a gap.
        assert (len(expected - run.seen), run.missed) == (0, 0)
        # The killed processes were started again: two of each run at the end.
        assert (len(run.children("webapp.serve")), len(run.children("writer_main"))) == (2, 2)
        log = (run.data / "serve.log").read_text()
        assert "writer-0 exited with status -9; starting it again" in log
        assert re.search(r"worker-\d exited with status -9; starting it again", log), log
    finally:
        run.stop()
        server.close()
        shutil.rmtree(run.data, ignore_errors=True)


def _slot(run: Run, name: str) -> psutil.Process:
    (proc,) = [p for p in run.children("writer_main") if any(part.endswith(f"-{name}") for part in p.cmdline())]
    return proc


def _stored_per_host(database: str) -> dict[str, tuple[int, int, int, int]]:
    """host -> (rows, distinct seqs, min seq, max seq) over the record tables."""
    import psycopg

    union = " UNION ALL ".join(f"SELECT host_id, seq FROM {table}" for table in TABLES)
    with psycopg.connect(database) as conn:
        rows = conn.execute(
            f"SELECT host_id, count(*), count(DISTINCT seq), min(seq), max(seq) FROM ({union}) t GROUP BY host_id"
        ).fetchall()
    return {host: (count, distinct, low, high) for host, count, distinct, low, high in rows}

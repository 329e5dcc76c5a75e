"""Every batch answered 200 is stored, even when Redis is killed (SIGKILL) right after the last answer.

Real components: `nettrail serve --workers 1 --writers 1` (daphne ingest worker,
writer process), a redis-server started here with ``appendonly yes`` and
``appendfsync always`` on its own port and directory (tests/redis_server.py), a
fresh PostgreSQL database. The writer is paused (SIGSTOP) while the hosts post, so
every answered batch lives only in Redis when Redis is killed by PID right after
the last 200. Redis starts again on the same AOF; the stream must hold every
answered batch before the writer resumes (SIGCONT), and at the end the database
must hold exactly the records answered 200: same count, same (host, seq)s, no
duplicate. Needs redis-server and NETTRAIL_TEST_POSTGRES_URL (`. scripts/test-services`).
"""
# ruff: noqa: F811 -- the database fixture imported from scale_out_db is redefined as a test argument

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
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
HOSTS = ["crash-a", "crash-b", "crash-c"]
BATCHES = 8  # per host
BATCH = 50  # records per batch
TABLES = ("traces_tcpretransmit", "traces_skbdrop")
STREAM, GROUP = "nettrail:ingest", "writers"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not PG_URL, reason="needs NETTRAIL_TEST_POSTGRES_URL (. scripts/test-services)"),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]


def batch(host: str, first_seq: int) -> list[Any]:
    out: list[Any] = []
    for seq in range(first_seq, first_seq + BATCH):
        env = {"host_id": host, "boot_id": "boot-1", "seq": seq, "ts_ns": seq * 1000, "ts_wall": time.time()}
        if seq % 3:
            out.append(r.TcpRetransmit(**env, conn_uuid=f"{host}-c{seq % 5}", provider="tcp", probe="retransmit"))
        else:
            out.append(r.SkbDrop(**env, provider="skb", probe="m-free", drop_reason=2, drop_reason_str="NO_SOCKET"))
    return out


def children(proc: subprocess.Popen[bytes], marker: str) -> list[psutil.Process]:
    found = []
    for child in psutil.Process(proc.pid).children(recursive=True):
        try:
            if any(marker in part for part in child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def wait_for(what: str, check: Any, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} not within {timeout:.0f} s:\n{log.read_text()}"
        time.sleep(0.2)


def stored(database: str) -> list[tuple[str, int]]:
    import psycopg

    union = " UNION ALL ".join(f"SELECT host_id, seq FROM {table}" for table in TABLES)
    with psycopg.connect(database) as conn:
        return [(host, seq) for host, seq in conn.execute(f"SELECT host_id, seq FROM ({union}) t ORDER BY 1, 2")]


def test_every_batch_answered_200_is_stored_after_redis_is_killed_right_after_the_last_answer(database: str) -> None:
    server = RedisServer()  # appendonly yes, appendfsync always
    server.start()
    work = Path(tempfile.mkdtemp(prefix="nettrail-crash-"))
    work.chmod(0o755)  # the cluster's children run as the nettrail user
    log_path = work / "serve.log"
    port = free_port()
    env = {**os.environ, "DATABASE_URL": database, "REDIS_URL": server.url, "NETTRAIL_DATA": str(work / "data")}
    env.update(NETTRAIL_TRIM_INTERVAL="0", ALLOWED_HOSTS="127.0.0.1,localhost", PYTHONDONTWRITEBYTECODE="1")
    env.pop("CHANNEL_LAYER", None)
    proc: subprocess.Popen[bytes] | None = None
    writer: psutil.Process | None = None
    try:
        setup = subprocess.run(
            [sys.executable, str(REPO / "tests" / "scale_out_setup.py"), *HOSTS],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=True,
        )  # fmt: skip
        tokens = json.loads(setup.stdout.strip().splitlines()[-1])["tokens"]
        command = [
            sys.executable,
            "-m",
            "nettrail.cli",
            "serve",
            "--port",
            str(port),
            "--workers",
            "1",
            "--writers",
            "1",
        ]
        with log_path.open("wb") as log:
            proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        client = redis.Redis(port=server.port)

        def ready() -> bool:
            assert proc is not None and proc.poll() is None, log_path.read_text()
            try:
                answer = requests.get(f"http://127.0.0.1:{port}/accounts/login/", timeout=2).status_code == 200
            except requests.RequestException:
                return False
            # The writer has joined the group (its first XREADGROUP): it reads from here on.
            return answer and len(client.xinfo_consumers(STREAM, GROUP)) == 1

        wait_for("the cluster", ready, 120, log_path)
        (writer,) = children(proc, "writer_main")
        writer.suspend()  # SIGSTOP: what is answered now stays in Redis only

        answered: list[tuple[str, int]] = []
        session = requests.Session()
        for i in range(BATCHES):
            for host in HOSTS:
                records = batch(host, 1 + i * BATCH)
                resp = session.post(
                    f"http://127.0.0.1:{port}/api/ingest",
                    data=msgspec.msgpack.encode(records),
                    headers={"Authorization": f"Bearer {tokens[host]}", "Content-Type": "application/msgpack"},
                    timeout=60,
                )
                assert resp.status_code == 200, resp.text
                answered += [(rec.host_id, rec.seq) for rec in records]
        server.kill()  # SIGKILL by PID, right after the last 200: no shutdown, no flush

        assert stored(database) == []  # every answered batch was in Redis only
        server.start()  # same port, same directory: it reads the AOF
        assert client.xlen(STREAM) == BATCHES * len(HOSTS)
        writer.resume()  # SIGCONT: its connection broke; it reconnects and reads its pending entries first

        def drained() -> bool:
            (group,) = client.xinfo_groups(STREAM)
            return bool(client.xlen(STREAM) == 0 and group["pending"] == 0 and group["lag"] == 0)

        wait_for("the writer storing every entry", drained, 240, log_path)
        assert stored(database) == sorted(answered)
        assert len(answered) == len(HOSTS) * BATCHES * BATCH
    finally:
        if writer is not None:
            try:
                writer.resume()  # a stopped writer would not see the cluster's SIGTERM
            except psutil.NoSuchProcess:
                pass
        if proc is not None:
            stop_cluster(proc)
        server.close()
        shutil.rmtree(work, ignore_errors=True)


def stop_cluster(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to `nettrail serve` (it stops its children); whatever is left is killed by PID."""
    try:
        left = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:  # it exited already: the test's own error says why, and Redis still goes
        left = []
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for child in left:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass

"""A Redis that does not fsync before answering is refused: no batch is answered 200 that a crash could lose.

The ingest tier answers 200 only when Redis runs ``appendonly yes`` with
``appendfsync always`` (webapp/bus/streams.py ``require_durable``, read again before
every batch); otherwise 503, the collector's spool keeps the batch, and the Status
API and /metrics say why. ``nettrail serve`` refuses to start on such a Redis.
Real redis-servers (tests/redis_server.py), each on its own port and directory.
"""
# ruff: noqa: F811 -- pytest fixtures imported from webapp_cast are redefined as test arguments

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from django.test import Client, override_settings
from redis_server import RedisServer
from webapp_cast import Cast, cast, post, retransmit  # noqa: F401 (cast is a fixture)

from webapp.bus import streams
from webapp.traces.models import TcpRetransmit

pytestmark = [pytest.mark.django_db]
REPO = Path(__file__).resolve().parent.parent
REFUSAL = (
    "ingest bus unavailable: Redis would lose answered batches in a crash or power loss ({setting}); "
    "run it with appendonly yes and appendfsync always (docs/scale-out.md)"
)


@pytest.fixture
def everysec() -> Iterator[RedisServer]:
    server = RedisServer(appendfsync="everysec")
    server.start()
    streams.client.cache_clear()
    try:
        with override_settings(NETTRAIL_REDIS_URL=server.url):
            yield server
    finally:
        streams.client.cache_clear()
        server.close()


@pytest.fixture
def always() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    streams.client.cache_clear()
    try:
        with override_settings(NETTRAIL_REDIS_URL=server.url):
            yield server
    finally:
        streams.client.cache_clear()
        server.close()


def test_ingest_answers_503_and_queues_nothing_when_redis_fsyncs_once_a_second(
    cast: Cast, everysec: RedisServer
) -> None:
    resp = post(Client(), cast.token_a, [retransmit("host-a", 1), retransmit("host-a", 2)])
    assert (resp.status_code, resp.json()) == (503, {"error": REFUSAL.format(setting="aof everysec")})
    assert redis.Redis(port=everysec.port).exists(streams.STREAM) == 0
    assert TcpRetransmit.objects.count() == 0


def test_the_status_api_and_metrics_flag_a_redis_that_could_lose_answered_batches(
    cast: Cast, everysec: RedisServer
) -> None:
    client = Client()
    client.force_login(cast.admin)
    bus_state = client.get("/api/dash/status").json()["bus"]
    assert (bus_state["durability"], bus_state["durable"]) == ("aof everysec", False)
    assert "nettrail_bus_durable 0.0" in client.get("/metrics").content.decode()


def test_a_redis_changed_at_runtime_is_refused_from_the_next_batch_on(cast: Cast, always: RedisServer) -> None:
    admin = redis.Redis(port=always.port)
    assert post(Client(), cast.token_a, [retransmit("host-a", 1)]).status_code == 200
    admin.config_set("appendfsync", "everysec")
    resp = post(Client(), cast.token_a, [retransmit("host-a", 2)])
    assert (resp.status_code, resp.json()) == (503, {"error": REFUSAL.format(setting="aof everysec")})
    admin.config_set("appendonly", "no")
    resp = post(Client(), cast.token_a, [retransmit("host-a", 3)])
    assert (resp.status_code, resp.json()) == (503, {"error": REFUSAL.format(setting="no aof")})
    admin.config_set("appendonly", "yes")
    admin.config_set("appendfsync", "always")
    admin.config_set("no-appendfsync-on-rewrite", "yes")  # answers unsynced while it rewrites or saves
    resp = post(Client(), cast.token_a, [retransmit("host-a", 4)])
    assert (resp.status_code, resp.json()) == (
        503,
        {"error": REFUSAL.format(setting="aof always, no fsync during rewrites")},
    )
    admin.config_set("no-appendfsync-on-rewrite", "no")
    assert post(Client(), cast.token_a, [retransmit("host-a", 5)]).status_code == 200
    # Only the two batches answered 200 are on the stream.
    assert [fields[b"n"] for _, fields in admin.xrange(streams.STREAM)] == [b"1", b"1"]


def test_a_redis_whose_configuration_cannot_be_read_is_refused(cast: Cast) -> None:
    # A managed Redis often disables CONFIG: its durability cannot be shown, so no batch is answered 200.
    server = RedisServer(extra=("--rename-command", "CONFIG", ""))
    server.start()
    streams.client.cache_clear()
    try:
        with override_settings(NETTRAIL_REDIS_URL=server.url):
            resp = post(Client(), cast.token_a, [retransmit("host-a", 1)])
        assert (resp.status_code, resp.json()) == (503, {"error": REFUSAL.format(setting="unknown")})
        assert redis.Redis(port=server.port).exists(streams.STREAM) == 0
    finally:
        streams.client.cache_clear()
        server.close()


def test_nettrail_serve_refuses_to_start_on_a_redis_that_fsyncs_once_a_second() -> None:
    server = RedisServer(appendfsync="everysec")
    server.start()
    with tempfile.TemporaryDirectory(prefix="nettrail-serve-") as data:
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CHANNEL_LAYER")}
        env.update(REDIS_URL=server.url, NETTRAIL_DATA=data, PYTHONDONTWRITEBYTECODE="1")
        try:
            done = subprocess.run(
                [sys.executable, "-m", "nettrail.cli", "serve", "--workers", "1", "--writers", "1", "--port", "0"],
                cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
        finally:
            server.close()
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "nettrail serve: Redis would lose answered batches in a crash or power loss (aof everysec); "
        "run it with appendonly yes and appendfsync always (docs/scale-out.md)"
    )
    assert "started (pid" not in done.stdout  # no worker or writer was started

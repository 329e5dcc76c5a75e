"""The Redis stream between the HTTP ingest tier and the writer processes.

One stream, ``nettrail:ingest``; one entry per accepted batch: ``host`` (the
token's host), ``n`` (records), ``body`` (the validated records, MessagePack) and,
when the database is PostgreSQL, ``copy`` (the same records' rows as COPY text per
kind, with their days: webapp/traces/pgcopy.encode), which a writer sends to COPY
as it is. An entry without ``copy`` (an older ingest worker's) is stored from ``body``.
One consumer group, ``writers``: each entry goes to one writer, stays pending
until that writer has committed it and XACKs it (then it is deleted), and is
claimed by another writer (XAUTOCLAIM) when its writer died holding it. Writers
publish their counters in ``nettrail:writer:<name>`` hashes, which expire when the
writer stops refreshing them, so the Status page and /metrics show only live ones.

Durability: a batch is answered 200 only once Redis has it on disk. ``append``
reads Redis's AOF settings (``CONFIG GET``, one round trip) before each XADD and
refuses the batch (``NotDurable``, a RedisError: the ingest view answers 503 and the
collector's spool keeps it) unless Redis runs with ``appendonly yes`` and
``appendfsync always`` (and ``no-appendfsync-on-rewrite no``, its default): then
Redis fsyncs the AOF before it sends the XADD's reply, so neither a Redis SIGKILL
nor a power loss can lose a batch already answered. ``everysec`` could lose up to a second of answered batches, which
no collector would resend and nothing would count. docs/scale-out.md has the choice.
Keep in sync with: webapp/bus/writer.py, webapp/traces/ingest.py, docs/scale-out.md.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import redis
from django.conf import settings
from django.db import connection

from translators.records import Record

STREAM = "nettrail:ingest"
GROUP = "writers"
WRITER_KEY = "nettrail:writer:"  # + consumer name: that writer's counters (a hash)
WRITER_TTL = 30  # seconds a writer's counters outlive its last refresh
DURABLE = "aof always"  # the one setting under which an answered batch survives a crash (durability())
_encode = msgspec.msgpack.Encoder().encode
_Value = bytes | bytearray | memoryview | str | int | float  # what redis-py accepts as a field or value


def enabled() -> bool:
    return settings.NETTRAIL_REDIS_URL is not None


@functools.cache
def client() -> redis.Redis:
    """One client (and connection pool) per process; redis-py reconnects after a Redis restart."""
    url = settings.NETTRAIL_REDIS_URL
    if url is None:
        raise RuntimeError("REDIS_URL is not set")
    return redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5, health_check_interval=15)


class NotDurable(redis.RedisError):
    """Redis would not keep an answered batch through a crash or a power loss: the batch is refused."""


def append(host: str, records: Sequence[Record]) -> str:
    """XADD one batch; returns its entry id once Redis has it on disk (raises redis.RedisError otherwise).

    The AOF setting is read again before every batch, not once at start: a Redis
    restarted with another configuration, or changed by CONFIG SET, is caught at
    the next batch. A batch refused here stays in the collector's spool.
    """
    conn = client()
    require_durable(conn)
    entry = conn.xadd(STREAM, entry_fields(host, records))
    return entry.decode() if isinstance(entry, bytes) else str(entry)


def require_durable(conn: redis.Redis | None = None) -> None:
    """Raise NotDurable unless Redis fsyncs its AOF before answering a write (``aof always``)."""
    setting = durability(conn)
    if setting != DURABLE:
        raise NotDurable(
            f"Redis would lose answered batches in a crash or power loss ({setting}); "
            "run it with appendonly yes and appendfsync always (docs/scale-out.md)"
        )


def entry_fields(host: str, records: Sequence[Record], copy_ready: bool | None = None) -> dict[_Value, _Value]:
    """One entry's fields: host, n, body, and on PostgreSQL ``copy``, the rows COPY-ready.

    The ingest tier has just validated the records, so it also formats their rows
    (webapp/traces/pgcopy.encode): the writer then sends those bytes to COPY as they
    are, and its own work per record is only the decode and the Connection fold.
    copy_ready: add ``copy`` (default: when the database is PostgreSQL).
    """
    fields: dict[_Value, _Value] = {"host": host, "n": len(records), "body": _encode(records)}
    if copy_ready if copy_ready is not None else connection.vendor == "postgresql":
        from webapp.traces import pgcopy  # the models: imported once Django is set up

        fields["copy"] = _encode(pgcopy.encode(records))
    return fields


def ensure_group(conn: redis.Redis | None = None) -> None:
    """The writers' group, created with the stream; reading from its start (entries added before it)."""
    try:
        (conn or client()).xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


@dataclass(frozen=True)
class WriterStats:
    name: str
    records: int
    batches: int
    duplicates: int
    rate: float  # records/s over the writer's last reporting interval
    pending: int  # entries delivered to it and not yet acknowledged
    idle_ms: int  # since its last read or claim


@dataclass(frozen=True)
class BusStatus:
    length: int  # entries in the stream (accepted, not yet stored and acknowledged)
    pending: int  # of those, delivered to a writer and not yet acknowledged
    lag: int | None  # of those, never delivered to any writer (None: Redis could not tell)
    writers: list[WriterStats]
    durability: str
    durable: bool  # durability == DURABLE; otherwise the ingest tier answers every batch 503


def status(conn: redis.Redis | None = None) -> BusStatus:
    conn = conn or client()
    ensure_group(conn)
    group = next((g for g in _decoded(conn.xinfo_groups(STREAM)) if g["name"] == GROUP), {})
    consumers = {c["name"]: c for c in _decoded(conn.xinfo_consumers(STREAM, GROUP))}
    writers = []
    for key in sorted(conn.scan_iter(match=WRITER_KEY + "*", count=100)):
        name = _text(key)[len(WRITER_KEY) :]
        fields = {_text(k): _text(v) for k, v in conn.hgetall(key).items()}
        consumer = consumers.get(name, {})
        writers.append(
            WriterStats(
                name=name,
                records=int(fields.get("records", 0)),
                batches=int(fields.get("batches", 0)),
                duplicates=int(fields.get("duplicates", 0)),
                rate=float(fields.get("rate", 0.0)),
                pending=int(consumer.get("pending", 0)),
                idle_ms=int(consumer.get("idle", 0)),
            )
        )
    lag = group.get("lag")
    setting = durability(conn)
    return BusStatus(
        length=int(conn.xlen(STREAM)),
        pending=int(group.get("pending", 0)),
        lag=None if lag is None else int(lag),
        writers=writers,
        durability=setting,
        durable=setting == DURABLE,
    )


def durability(conn: redis.Redis | None = None) -> str:
    """``aof always`` (DURABLE) / ``aof everysec`` / ``aof no`` / ``no aof`` / ``unknown`` (CONFIG refused),
    or ``aof always, no fsync during rewrites`` (``no-appendfsync-on-rewrite yes``: while
    Redis rewrites its AOF or saves a snapshot it answers without fsyncing)."""
    conn = conn or client()
    pipe = conn.pipeline(transaction=False)  # one round trip; globs, as Redis before 7.0 takes one name only
    pipe.config_get("append*")
    pipe.config_get("no-appendfsync-on-rewrite")
    try:
        appends, on_rewrite = pipe.execute()
    except redis.ResponseError:  # CONFIG disabled or renamed (a managed Redis): not provably durable
        return "unknown"
    if _text(appends.get("appendonly", "no")) != "yes":
        return "no aof"
    setting = f"aof {_text(appends.get('appendfsync', '?'))}"
    if _text(on_rewrite.get("no-appendfsync-on-rewrite", "no")) != "no":
        setting += ", no fsync during rewrites"
    return setting


def publish_writer(conn: redis.Redis, name: str, records: int, batches: int, duplicates: int, rate: float) -> None:
    key = WRITER_KEY + name
    pipe = conn.pipeline(transaction=False)
    fields: dict[_Value, _Value] = {
        "records": records,
        "batches": batches,
        "duplicates": duplicates,
        "rate": round(rate, 1),
        "updated": time.time(),
    }
    pipe.hset(key, mapping=fields)
    pipe.expire(key, WRITER_TTL)
    pipe.execute()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _decoded(rows: list[dict[Any, Any]]) -> list[dict[str, Any]]:
    return [{_text(k): (_text(v) if isinstance(v, bytes) else v) for k, v in row.items()} for row in rows]

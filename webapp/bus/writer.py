"""A writer process: batches from the Redis stream into the database, acknowledged after commit.

Loop (``Writer.run``): first the entries already delivered to this writer and not
acknowledged (its own pending list, after a restart under the same name), then
every ``claim_every`` seconds the entries a dead writer held longer than
``claim_idle_ms`` (XAUTOCLAIM), otherwise new entries (XREADGROUP ``>``, blocking
up to ``block_ms``). Each entry: ``store_entry`` (decode, store: one transaction), the
live push, then XACK + XDEL, then the alert mail. The records were validated by the
ingest tier before they were queued, so they are decoded without the vocabulary
checks, and their rows come COPY-ready in the entry's ``copy`` field (streams.py):
an all-new batch is stored from its records' views (webapp/traces/view.py), the whole
records are decoded only for a batch with duplicates or a refused value, and for a
live push that has listeners. So an entry is acknowledged only
once its records are committed; a writer killed between commit and XACK leaves it
pending, another writer claims it, and storage's idempotence on (host, boot, seq)
makes it a duplicate, never a double.

Live pushes are at least once: a redelivered entry (claimed, or this writer's own
pending) pushes every record of the batch, because the writer that died may have
died before its push; browsers keep one row per (host, boot, seq). A push that
fails (Redis restarting) raises, so the entry stays pending and is pushed again
(push.push strict: the offsets continue, no gap), for up to PUSH_RETRY_FOR seconds.
A push Redis accepted can still be lost to a browser in a Redis restart, with no later
message to show the jump: after its Redis connection fails, a writer pushes again the
batches it pushed in the seconds before (webapp/bus/recent_pushes.py).
A batch the database refuses (UnstorableRecord), or an entry that does not decode,
cannot succeed later: it goes to
``nettrail:ingest:refused`` with the reason, its host gets a loss report of its record
count (webapp/traces/refusal_loss.py), and it is acknowledged.
Keep in sync with: webapp/bus/streams.py, webapp/traces/ingest.py, docs/scale-out.md.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec
import redis
from django.db import DatabaseError, close_old_connections, connection

from translators.records import Record, decode_batch
from webapp.bus import streams
from webapp.bus.recent_pushes import RecentPushes
from webapp.traces import alert_mail, pgbulk, pgcopy, push, refusal_loss
from webapp.traces.store import StoreResult, UnstorableRecord, store_batch, store_new_batch

log = logging.getLogger(__name__)
REFUSED = streams.STREAM + ":refused"
PUBLISH_EVERY = 2.0  # seconds between the writer's counters in Redis (Status page, /metrics)
PUSH_RETRY_FOR = 60.0  # seconds an entry's live push is retried before the clients get a gap instead


def default_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@contextmanager
def host_lock(host: bytes | None, wait: bool) -> Iterator[bool]:
    """Hold PostgreSQL's advisory lock of one host while its batch is stored; yields False
    when `wait` is False and another writer holds it.

    Two writers storing batches of one host update the same Connection rows, so the
    second waits on the first's row locks until it commits (two writers were slower
    than one in bench_bus.py). With this, a writer that finds a host busy stores its
    other hosts' batches first and only then waits. Session-level: released after
    the commit, or with the session if the database connection dies.
    """
    if host is None or connection.vendor != "postgresql":
        yield True
        return
    key = "nettrail-host:" + host.decode("utf-8", "replace")
    with connection.cursor() as cursor:
        if wait:
            cursor.execute("SELECT pg_advisory_lock(hashtext(%s))", [key])
            got = True
        else:
            cursor.execute("SELECT pg_try_advisory_lock(hashtext(%s))", [key])
            row = cursor.fetchone()
            got = bool(row and row[0])
    try:
        yield got
    finally:
        if got:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(hashtext(%s))", [key])


def store_entry(fields: dict[bytes, bytes]) -> tuple[StoreResult, list[Record] | None]:
    """Store one stream entry in one transaction; the result, and the whole records when
    they were decoded (None: stored from their views, every record new).

    The records were validated by the ingest tier before they were queued: msgspec's
    type checks only. With COPY-ready rows (PostgreSQL) the batch is first stored from
    its views (webapp/traces/view.py: the fields the fold and the hooks read, nothing
    else decoded); a batch holding a stored record, or a value the database refuses,
    is stored from its whole records (duplicates counted, the value named).
    """
    copy = fields.get(b"copy")
    encoded = pgcopy.decode(copy) if copy is not None else None
    if encoded is not None and connection.vendor == "postgresql":
        result = store_new_batch(fields[b"body"], encoded)
        if result is not None:
            return result, None
    records = decode_batch(fields[b"body"], "msgpack", trusted=True)
    return store_batch(records, encoded), records


@dataclass
class Writer:
    name: str = field(default_factory=default_name)
    count: int = 8  # entries per read: a few batches, each its own transaction
    block_ms: int = 1000
    claim_idle_ms: int = 15_000  # an entry pending this long belongs to a dead (or stuck) writer
    claim_every: float = 5.0
    records: int = 0
    batches: int = 0
    duplicates: int = 0
    _conn: redis.Redis | None = None
    _next_claim: float = 0.0
    _window: tuple[float, int] = (0.0, 0)  # (time, records) at the last publish
    _push_failing: dict[bytes, float] = field(default_factory=dict)  # entry -> first failed push
    _recent: RecentPushes = field(default_factory=RecentPushes)  # pushed lately: again after a Redis failure
    _redis_failed_at: float | None = None  # the first Redis failure not yet followed by a re-push
    _redis_run: tuple[str, float] = ("", 0.0)  # Redis's run_id at the last publish, and when

    @property
    def conn(self) -> redis.Redis:
        if self._conn is None:
            self._conn = streams.client()
        return self._conn

    def run(self, stop: threading.Event) -> None:
        log.info("writer %s: reading %s as group %s", self.name, streams.STREAM, streams.GROUP)
        self._window = (time.monotonic(), 0)
        streams.ensure_group(self.conn)
        while not stop.is_set():
            try:
                self.step()
            except (redis.ConnectionError, redis.TimeoutError, push.PushFailed) as exc:
                log.warning("writer %s: Redis unavailable (%s); retrying", self.name, exc)
                if self._redis_failed_at is None:
                    self._redis_failed_at = time.monotonic()
                stop.wait(0.5)
            except DatabaseError:
                log.exception("writer %s: database error; the entry stays pending and is retried", self.name)
                close_old_connections()
                stop.wait(1.0)
            except redis.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                streams.ensure_group(self.conn)  # Redis came back without its data
        pgbulk.close_side()
        self.publish()

    def step(self) -> int:
        """One read (own pending, claimed, or new entries) and its entries stored; returns the entries handled."""
        entries = self._read("0")  # own pending: delivered before a restart or a failed commit
        if self._redis_failed_at is not None:  # Redis answers again
            self._push_again(self._redis_failed_at)
            self._redis_failed_at = None
        redelivered = True
        if not entries and time.monotonic() >= self._next_claim:
            self._next_claim = time.monotonic() + self.claim_every
            entries = self._claim()
        if not entries:
            redelivered = False
            entries = self._read(">", self.block_ms)
        deferred = []
        for entry_id, fields in entries:
            with host_lock(fields.get(b"host"), wait=False) as mine:
                if mine:
                    self._handle(entry_id, fields, redelivered)
                else:  # another writer is storing a batch of this host: its rows are locked
                    deferred.append((entry_id, fields))
        for entry_id, fields in deferred:  # the other hosts' batches are done: now wait for it
            with host_lock(fields.get(b"host"), wait=True):
                self._handle(entry_id, fields, redelivered)
        if time.monotonic() - self._window[0] >= PUBLISH_EVERY:
            self.publish()
        return len(entries)

    def publish(self) -> None:
        now = time.monotonic()
        # a restart the client reconnected through without an error is still a restart
        run_id = str(self.conn.info("server").get("run_id", ""))
        if self._redis_run[0] and run_id != self._redis_run[0] and self._redis_failed_at is None:
            self._redis_failed_at = self._redis_run[1]
        self._redis_run = (run_id, now)
        since, before = self._window
        rate = (self.records - before) / (now - since) if now > since else 0.0
        self._window = (now, self.records)
        streams.publish_writer(self.conn, self.name, self.records, self.batches, self.duplicates, rate)

    def _read(self, start: str, block: int | None = None) -> list[tuple[bytes, dict[bytes, bytes]]]:
        answer: Any = self.conn.xreadgroup(
            streams.GROUP, self.name, {streams.STREAM: start}, count=self.count, block=block
        )
        if not answer:
            return []
        entries = answer[0][1]
        for entry_id, fields in entries:
            if not fields:  # pending but deleted from the stream: nothing left to store
                self._ack(entry_id)
        return [(entry_id, fields) for entry_id, fields in entries if fields]

    def _claim(self) -> list[tuple[bytes, dict[bytes, bytes]]]:
        answer: Any = self.conn.xautoclaim(
            streams.STREAM, streams.GROUP, self.name, min_idle_time=self.claim_idle_ms, start_id="0-0", count=self.count
        )
        claimed = [(entry_id, fields) for entry_id, fields in answer[1] if fields]
        if claimed:
            log.info("writer %s: claimed %d entries of a dead writer", self.name, len(claimed))
        return claimed

    def _handle(self, entry_id: bytes, fields: dict[bytes, bytes], redelivered: bool) -> None:
        try:
            result, records = store_entry(fields)
        except (UnstorableRecord, msgspec.DecodeError) as exc:  # ValidationError is a DecodeError
            log.error("writer %s: entry %s refused by the database: %s", self.name, entry_id, exc)
            self.conn.xadd(REFUSED, {"host": fields[b"host"], "body": fields[b"body"], "error": str(exc)})
            refusal_loss.report_refused(
                fields[b"host"].decode(errors="replace"), entry_id.decode(), int(fields.get(b"n", 0))
            )
            self._ack(entry_id)
            return
        # Push before XACK: a push that fails (Redis restarting) leaves the entry pending,
        # and its redelivery pushes the batch again, so a live client misses nothing. A
        # push failing for PUSH_RETRY_FOR seconds is given up: acknowledged, and the live
        # clients are told of the records as a gap (push's offsets), so the stream moves on.
        pushed: list[Record] = []  # views are never pushed: they lack the fields browsers show
        if records is None:  # stored from its views, so every record was new
            if push.listening():
                pushed = result.new = decode_batch(fields[b"body"], "msgpack", trusted=True)
        else:
            pushed = records if redelivered else result.new
        try:
            push.push(pushed, strict=True)
        except push.PushFailed:
            first = self._push_failing.setdefault(entry_id, time.monotonic())
            if time.monotonic() - first < PUSH_RETRY_FOR:
                raise
            log.error(
                "writer %s: entry %s: live push failing for %.0f s; given up", self.name, entry_id, PUSH_RETRY_FOR
            )
            push.push(pushed)  # not strict: the offsets move on, subscribers get the gap
        self._push_failing.pop(entry_id, None)
        if pushed:
            self._recent.add(time.monotonic(), fields[b"body"])
        self._ack(entry_id)
        self.records += result.stored
        self.duplicates += result.duplicates
        self.batches += 1
        alert_mail.MAILER.submit(result.new)

    def _push_again(self, failed_at: float) -> None:
        """After Redis was away: the batches pushed shortly before, pushed again (strict: a
        failure raises, and the re-push is tried again after the next one)."""
        bodies, incomplete = self._recent.before(failed_at)
        if incomplete:
            log.error(
                "writer %s: batches pushed just before Redis went away exceed the re-push memory;"
                " browsers may have missed some of them",
                self.name,
            )
        count = 0
        for body in bodies:
            batch = decode_batch(body, "msgpack", trusted=True)
            push.push(batch, strict=True)
            count += len(batch)
        if bodies:
            log.info("writer %s: Redis is back: %d records pushed again (%d batches)", self.name, count, len(bodies))

    def _ack(self, entry_id: bytes) -> None:
        pipe = self.conn.pipeline(transaction=True)
        pipe.xack(streams.STREAM, streams.GROUP, entry_id)
        pipe.xdel(streams.STREAM, entry_id)
        pipe.execute()

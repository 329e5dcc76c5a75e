"""The live websocket `/ws/live/`: pushes newly ingested records to subscribed browsers.

Protocol (docs/api.md, "Live websocket"): the client sends
``{"subscribe": {"host": H, "conn": U, "alerts": true, "kind": [...]}}`` and
``{"unsubscribe": {...}}``; each target (host H, connection U, the alert stream)
is one channel-layer group (``host.<H>``, ``conn.<U>``, ``alerts``) joined on
subscribe and left on unsubscribe or disconnect, with its own kind filter.
Ingest's ``group_send`` of ``{"type": "trace.batch", "records": [...]}`` lands in
``trace_batch``; records are buffered and pushed at most PUSH_HZ times a second as
``{"type": "records", "id": n, "records": [...]}``, so a burst makes a few messages.

Nothing is lost silently. Each record is encoded once as it arrives and messages are
cut by encoded size (MAX_MESSAGE_BYTES), so no message reaches daphne's 1 MiB frame
limit whatever the burst. Every client is flow-controlled: at most `window` records
messages go out unacknowledged (``{"ack": n}``, cumulative); while it lags its records
wait in a buffer of at most `max_buffer` records. When that overflows, the buffer is
emptied and from then on its records are only counted (server memory stays bounded:
the buffer, and `window` messages in daphne); once the client has acknowledged every
message in flight -- or acknowledged nothing for NETTRAIL_LIVE_STALL_SECONDS -- it
leaves its groups, is told ``{"type": "gap", "missed": N, "dropped": true}`` (N is
exactly the records routed to it that it never got) and is closed (4008). Records the
channel layer itself dropped (a full channel) are found from the per-group offsets
ingest puts on each message (push.py) and reported the same way, ``{"type": "gap",
"missed": N}``, without closing. A failed background push is logged and ends the
connection with a gap, never silently.

Keep in sync with: the ingest view's group_send (group names, message type),
webapp/dashboard/static/dashboard/js/common.js (the client) and docs/api.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import msgspec
from channels.exceptions import ChannelFull
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from translators.records import BY_KIND
from webapp.traces.push import group_name
from webapp.traces.session_close import SessionBound

PUSH_HZ = 10
# Daphne (autobahn) refuses outgoing frames over 1 MiB; the envelope and a margin fit in the rest.
MAX_MESSAGE_BYTES = 1_000_000
DEFAULT_WINDOW = 4  # unacknowledged records messages in flight
DEFAULT_MAX_BUFFER = 50_000  # records waiting for one client before it overflows
DEFAULT_STALL_SECONDS = 30.0  # an overflowed client that acks nothing for this long is dropped
MAX_TARGETS = 1000  # subscriptions per connection: bounds what one client can make us hold
CLOSE_UNAUTHENTICATED = 4401
CLOSE_TOO_SLOW = 4008
CLOSE_BAD_MESSAGE = 4400
CLOSE_SERVER_ERROR = 1011
ALERTS_GROUP = "alerts"
DROP_MESSAGE = "live.drop"  # sent to our own channel: it arrives after every batch queued before it
_ENVELOPE = len(b'{"type":"records","id":,"records":[]}') + 20  # 20: the id's digits
_encode = msgspec.json.Encoder().encode
log = logging.getLogger(__name__)


def host_group(host: str) -> str:
    return group_name("host", host)


def conn_group(conn_uuid: str) -> str:
    return group_name("conn", conn_uuid)


@dataclass
class Target:
    """One subscribed group and how records are matched to it."""

    group: str
    field: str  # record field naming the target ("host_id", "conn_uuid") or "kind" for alerts
    value: str
    kinds: frozenset[str] | None = None  # None: every kind

    def matches(self, record: dict[str, Any]) -> bool:
        if record.get(self.field) != self.value:
            return False
        return self.kinds is None or record.get("kind") in self.kinds


class SubscriptionError(ValueError):
    pass


def parse_targets(spec: Any) -> list[Target]:
    """Targets named by one subscribe/unsubscribe body; raises SubscriptionError with a message."""
    if not isinstance(spec, dict):
        raise SubscriptionError("subscribe/unsubscribe takes an object")
    unknown = set(spec) - {"host", "conn", "alerts", "kind"}
    if unknown:
        raise SubscriptionError(f"unknown subscription key {sorted(unknown)[0]!r}")
    kinds = _parse_kinds(spec.get("kind"))
    targets = []
    for key, field_name in (("host", "host_id"), ("conn", "conn_uuid")):
        value = spec.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not value:
            raise SubscriptionError(f"{key} must be a non-empty string")
        group = host_group(value) if key == "host" else conn_group(value)
        targets.append(Target(group, field_name, value, kinds))
    if spec.get("alerts"):
        targets.append(Target(ALERTS_GROUP, "kind", "alert", None))
    if not targets:
        raise SubscriptionError("name a host, a conn or alerts")
    return targets


def _parse_kinds(value: Any) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
        raise SubscriptionError("kind must be a list of record kinds")
    bad = [k for k in value if k not in BY_KIND]
    if bad:
        raise SubscriptionError(f"unknown record kind {bad[0]!r}")
    return frozenset(value)


@dataclass
class Outbox:
    """Records waiting to be pushed to one client (encoded), with the flow-control counters."""

    records: deque[bytes] = field(default_factory=deque)
    # Keys of buffered and last-pushed records: a record reaching us through two groups
    # (host.H and conn.U) comes in two messages sent back to back by ingest.
    keys: set[tuple[Any, ...]] = field(default_factory=set)
    pushed_keys: set[tuple[Any, ...]] = field(default_factory=set)
    sent_id: int = 0
    acked_id: int = 0
    last_push: float = 0.0
    missed: int = 0  # records this client subscribed to that it will never get
    reported: int = 0  # of which it has been told (gap messages)
    # Next expected offset per (sender, group): ingest numbers the records it sends to a
    # group, so a message the channel layer dropped shows as a jump (push.py).
    offsets: dict[tuple[str, str], int] = field(default_factory=dict)


class LiveConsumer(SessionBound, AsyncWebsocketConsumer):
    """One browser tab's live feed."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)  # before accept: the handshake is refused
            return
        self.targets: dict[str, Target] = {}
        self.outbox = Outbox()
        self.window = int(getattr(settings, "NETTRAIL_LIVE_WINDOW", DEFAULT_WINDOW))
        self.max_buffer = int(getattr(settings, "NETTRAIL_LIVE_MAX_BUFFER", DEFAULT_MAX_BUFFER))
        self.flush_task: asyncio.Task[None] | None = None
        self.stall_seconds = float(getattr(settings, "NETTRAIL_LIVE_STALL_SECONDS", DEFAULT_STALL_SECONDS))
        # Over its buffer: records are only counted (missed) until the client catches up
        # with what is in flight or the stall timer fires; then it is told and dropped.
        self.overflowed = False
        self.stall_timer: asyncio.Task[None] | None = None
        self.dropping = False  # left its groups; counting what was queued before, then closing
        await self.accept()
        await self.bind_session()  # logout or session expiry closes this socket

    async def disconnect(self, code: int) -> None:
        for name in ("flush_task", "stall_timer"):
            task = getattr(self, name, None)  # absent when connect() refused the handshake
            if task is not None:
                task.cancel()
        await self.unbind_session()
        await self._leave_all()

    # --- client -> server ----------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            message = json.loads(text_data or "")
        except ValueError:
            await self._error("messages are JSON objects")
            return
        if not isinstance(message, dict):
            await self._error("messages are JSON objects")
            return
        try:
            if "subscribe" in message:
                await self._subscribe(parse_targets(message["subscribe"]))
            elif "unsubscribe" in message:
                await self._unsubscribe(parse_targets(message["unsubscribe"]))
            elif "ack" in message:
                self._ack(message["ack"])
                if self.overflowed and self.outbox.acked_id == self.outbox.sent_id:
                    await self._start_drop()  # it has caught up with what it was sent: tell it now
            else:
                raise SubscriptionError("expected subscribe, unsubscribe or ack")
        except SubscriptionError as exc:
            await self._error(str(exc))

    async def _subscribe(self, targets: list[Target]) -> None:
        if self.dropping:
            return  # being dropped: joining again would undo it
        if len(set(self.targets) | {t.group for t in targets}) > MAX_TARGETS:
            raise SubscriptionError(f"at most {MAX_TARGETS} subscriptions per connection")
        for target in targets:
            if target.group not in self.targets:
                await self.channel_layer.group_add(target.group, self.channel_name)
                self._forget_offsets(target.group)  # offsets start again with the next message
            self.targets[target.group] = target  # subscribing again replaces the kind filter
        await self._send_json({"type": "subscribed", "groups": sorted(self.targets)})

    async def _unsubscribe(self, targets: list[Target]) -> None:
        for target in targets:
            if self.targets.pop(target.group, None) is not None:
                await self.channel_layer.group_discard(target.group, self.channel_name)
        await self._send_json({"type": "subscribed", "groups": sorted(self.targets)})

    def _ack(self, value: Any) -> None:
        if not isinstance(value, int) or isinstance(value, bool):
            raise SubscriptionError("ack takes the id of the last records message handled")
        self.outbox.acked_id = max(self.outbox.acked_id, min(value, self.outbox.sent_id))
        self._schedule()

    def _forget_offsets(self, group: str) -> None:
        offsets = self.outbox.offsets
        for key in [k for k in offsets if k[1] == group]:
            del offsets[key]

    # --- channel layer -> client ------------------------------------------------------------

    async def trace_batch(self, event: dict[str, Any]) -> None:
        """Ingest's group_send: keep the records this client subscribed to, push soon."""
        box = self.outbox
        records = event.get("records", ())
        if self.dropping or self.overflowed:  # counted, never buffered: memory stays bounded
            box.missed += len(self._wanted(records))
            return
        target = self.targets.get(event.get("group", ""))
        if target is None and "group" in event:
            return  # a message of a group we have just left
        self._check_offset(event, len(records))
        wanted = self._wanted(records)
        room = self.max_buffer - len(box.records)
        if len(wanted) > room:
            self._overflow(len(wanted))
            return
        box.records.extend(map(_encode, wanted))
        self._schedule()

    def _wanted(self, records: Any) -> list[dict[str, Any]]:
        box = self.outbox
        targets = list(self.targets.values())
        if len(targets) == 1:  # the common case: one filter, and no record can come twice
            return list(filter(targets[0].matches, records))
        out = []
        for record in records:
            if not any(t.matches(record) for t in targets):
                continue
            key = (record.get("host_id"), record.get("boot_id"), record.get("seq"), record.get("kind"))
            if key in box.keys or key in box.pushed_keys:
                continue
            box.keys.add(key)
            out.append(record)
        return out

    def _check_offset(self, event: dict[str, Any], count: int) -> None:
        sender, group, offset = event.get("sender"), event.get("group"), event.get("offset")
        if not isinstance(sender, str) or not isinstance(group, str) or not isinstance(offset, int):
            return
        key = (sender, group)
        expected = self.outbox.offsets.get(key)
        if expected is not None and offset > expected:
            # The layer dropped messages of this group (a full channel). Their kinds are
            # unknown, so all their records count: the client is told to reload.
            self.outbox.missed += offset - expected
            self._schedule()
        self.outbox.offsets[key] = offset + count

    def _overflow(self, arriving: int) -> None:
        """Over the buffer: what waits and what arrives from now on is counted, not kept.
        The client stays in its groups so the count stays exact, until it acknowledges
        every message in flight (it reads again) or the stall timer fires; then it gets
        the gap and is dropped."""
        box = self.outbox
        self.overflowed = True
        box.missed += len(box.records) + arriving
        box.records.clear()
        box.keys.clear()
        if box.acked_id == box.sent_id:  # nothing in flight to wait for
            self.stall_timer = asyncio.ensure_future(self._start_drop())
        else:
            self.stall_timer = asyncio.ensure_future(self._stall_then_drop())

    async def _stall_then_drop(self) -> None:
        await asyncio.sleep(self.stall_seconds)
        await self._start_drop()

    async def _start_drop(self) -> None:
        """Leave every group now, tell the client once the records already queued for
        us have been counted (our own message arrives after them)."""
        if self.dropping:
            return
        if self.stall_timer is not None and self.stall_timer is not asyncio.current_task():
            self.stall_timer.cancel()
        self.dropping = True
        for group in list(self.targets):
            await self.channel_layer.group_discard(group, self.channel_name)
        for _ in range(100):  # a full channel empties as we read it
            try:
                await self.channel_layer.send(self.channel_name, {"type": DROP_MESSAGE})
                return
            except ChannelFull:
                await asyncio.sleep(0.05)
        await self.live_drop({})

    async def live_drop(self, event: dict[str, Any]) -> None:
        # A flush in progress finishes the message it is sending (those records are
        # delivered) and stops there: `dropping` is set. Cancelling it could lose a
        # message between the buffer and the socket without counting it.
        box = self.outbox
        box.missed += len(box.records)
        box.records.clear()
        box.keys.clear()
        box.pushed_keys.clear()
        self.targets.clear()
        await self._send_json({"type": "gap", "missed": box.missed - box.reported, "dropped": True})
        box.reported = box.missed
        await self.close(code=CLOSE_TOO_SLOW)

    def _schedule(self) -> None:
        box = self.outbox
        if self.dropping or self.overflowed or not (box.records or box.missed > box.reported):
            return
        if self.flush_task is None or self.flush_task.done():
            self.flush_task = asyncio.ensure_future(self._flush_later())
            self.flush_task.add_done_callback(self._flush_done)

    def _flush_done(self, task: asyncio.Task[None]) -> None:
        # A background task's exception is otherwise only a "never retrieved" warning at
        # garbage collection: log it, count what was waiting as missed, end the connection.
        if task.cancelled() or task.exception() is None:
            return
        log.error("live push to %s failed", self.channel_name, exc_info=task.exception())
        asyncio.ensure_future(self._fail())

    async def _fail(self) -> None:
        self.dropping = True
        await self._leave_all()
        box = self.outbox
        box.missed += len(box.records)
        box.records.clear()
        try:
            await self._send_json({"type": "gap", "missed": box.missed - box.reported, "dropped": True})
            box.reported = box.missed
        finally:
            await self.close(code=CLOSE_SERVER_ERROR)

    async def _flush_later(self) -> None:
        wait = self.outbox.last_push + 1.0 / PUSH_HZ - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        await self._flush()

    async def _flush(self) -> None:
        box = self.outbox
        if self.dropping or self.overflowed:
            return
        if box.missed > box.reported:  # in order: the gap before the records that follow it
            missed = box.missed - box.reported
            box.reported = box.missed
            await self._send_json({"type": "gap", "missed": missed})
        while box.records:
            if self.dropping or self.overflowed:
                return  # live_drop counts what is left
            if box.sent_id - box.acked_id >= self.window:
                return  # the client lags: keep buffering; its next ack reschedules
            parts = self._take(MAX_MESSAGE_BYTES - _ENVELOPE)
            if not parts:
                continue  # only oversized records, counted as missed
            box.sent_id += 1
            head = b'{"type":"records","id":%d,"records":[' % box.sent_id
            await self.send(text_data=(head + b",".join(parts) + b"]}").decode())
        if box.missed > box.reported:  # oversized records just skipped
            missed = box.missed - box.reported
            box.reported = box.missed
            await self._send_json({"type": "gap", "missed": missed})
        box.pushed_keys, box.keys = box.keys, set()
        box.last_push = time.monotonic()

    def _take(self, budget: int) -> list[bytes]:
        """Encoded records from the front of the buffer, as many as fit in `budget` bytes."""
        records = self.outbox.records
        parts: list[bytes] = []
        used = 0
        while records:
            size = len(records[0]) + 1  # the comma
            if used + size > budget:
                if not parts:  # one record over the limit alone: cannot be sent, say so
                    records.popleft()
                    self.outbox.missed += 1
                    continue
                break
            parts.append(records.popleft())
            used += size
        return parts

    async def _leave_all(self) -> None:
        for group in list(getattr(self, "targets", {})):
            await self.channel_layer.group_discard(group, self.channel_name)
        if hasattr(self, "targets"):
            self.targets.clear()

    async def _error(self, message: str) -> None:
        await self._send_json({"type": "error", "error": message})

    async def _send_json(self, payload: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(payload, separators=(",", ":")))

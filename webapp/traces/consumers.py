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
messages and `window_bytes` bytes go out unacknowledged (``{"ack": n}``, cumulative;
ids are unguessable, outbox.py, and an ack naming no message sent closes the socket
with 4400); while it lags its records wait in a buffer of at most `max_buffer` records
and `max_buffer_bytes` bytes. Replies (subscribed, error) count in the same unread
bytes: past `window_bytes` + CONTROL_BYTES a ``subscribed`` reply waits (the newest
replaces an older one) for an ack, asked for with an empty records message, and any
other reply drops the client as too slow. So what one client makes the server hold
-- buffer, unread bytes in daphne, one waiting reply -- is bounded in bytes whatever
it sends, and a user has at most NETTRAIL_LIVE_SOCKETS_PER_USER sockets per process
(live_sockets.py; one more is closed with 4429). When the buffer overflows, it is
emptied and from then on its records are only counted; once the client has acknowledged every
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
from dataclasses import dataclass
from typing import Any

import msgspec
from channels.exceptions import ChannelFull
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from translators.records import BY_KIND
from webapp.traces import live_sockets
from webapp.traces.outbox import Outbox
from webapp.traces.push import group_name
from webapp.traces.session_close import SessionBound

PUSH_HZ = 10
# Daphne (autobahn) refuses outgoing frames over 1 MiB; the envelope and a margin fit in the rest.
MAX_MESSAGE_BYTES = 1_000_000
DEFAULT_WINDOW = 4  # unacknowledged records messages in flight
DEFAULT_WINDOW_BYTES = 4 << 20  # ... and their bytes (with any replies not yet proven read)
DEFAULT_MAX_BUFFER = 50_000  # records waiting for one client before it overflows
DEFAULT_MAX_BUFFER_BYTES = 16 << 20  # ... and their encoded bytes
DEFAULT_SOCKETS_PER_USER = 20  # open live sockets per user, per server process
# Unread reply bytes allowed beyond the records window before replies wait (subscribed)
# or the client is dropped (errors): a reply must not grow the server for a non-reader.
CONTROL_BYTES = 1 << 20
DEFAULT_STALL_SECONDS = 30.0  # an overflowed client that acks nothing for this long is dropped
MAX_TARGETS = 1000  # subscriptions per connection: bounds what one client can make us hold
CLOSE_UNAUTHENTICATED = 4401
CLOSE_TOO_SLOW = 4008
CLOSE_BAD_ACK = 4400  # an ack naming no records message sent: the client acknowledges what it never read
CLOSE_TOO_MANY_SOCKETS = 4429
CLOSE_SERVER_ERROR = 1011
ALERTS_GROUP = "alerts"
DROP_MESSAGE = "live.drop"  # sent to our own channel: it arrives after every batch queued before it
_ENVELOPE = len(b'{"type":"records","id":,"records":[]}') + 20  # 20: the id's digits
_encode = msgspec.json.Encoder().encode
QUOTED_MAX = 64  # characters of a client's bad value quoted back in an error
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
        raise SubscriptionError(f"unknown subscription key {_quote(sorted(unknown)[0])}")
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
        raise SubscriptionError(f"unknown record kind {_quote(bad[0])}")
    return frozenset(value)


def _quote(value: str) -> str:
    """A client's value in an error, cut short: a reply is never as long as what provoked it."""
    return repr(value if len(value) <= QUOTED_MAX else value[:QUOTED_MAX] + "...")


class LiveConsumer(SessionBound, AsyncWebsocketConsumer):
    """One browser tab's live feed."""

    claimed: object = None  # the user key holding a place in live_sockets
    flush_task: asyncio.Task[None] | None = None
    # Over its buffer: records are only counted (missed) until the client catches up
    # with what is in flight or the stall timer fires; then it is told and dropped.
    stall_timer: asyncio.Task[None] | None = None
    overflowed = False
    dropping = False  # left its groups; counting what was queued before, then closing
    held: str | None = None  # a subscribed reply waiting for the client to read what it was sent

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:  # also when the server cancels the instance without a disconnect
            self._release()

    def _release(self) -> None:
        if self.claimed is not None:
            live_sockets.release(self.claimed)
            self.claimed = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)  # before accept: the handshake is refused
            return
        self.targets: dict[str, Target] = {}
        self.outbox = Outbox()
        self.window = int(getattr(settings, "NETTRAIL_LIVE_WINDOW", DEFAULT_WINDOW))
        self.window_bytes = int(getattr(settings, "NETTRAIL_LIVE_WINDOW_BYTES", DEFAULT_WINDOW_BYTES))
        self.max_buffer = int(getattr(settings, "NETTRAIL_LIVE_MAX_BUFFER", DEFAULT_MAX_BUFFER))
        self.max_buffer_bytes = int(getattr(settings, "NETTRAIL_LIVE_MAX_BUFFER_BYTES", DEFAULT_MAX_BUFFER_BYTES))
        self.stall_seconds = float(getattr(settings, "NETTRAIL_LIVE_STALL_SECONDS", DEFAULT_STALL_SECONDS))
        cap = int(getattr(settings, "NETTRAIL_LIVE_SOCKETS_PER_USER", DEFAULT_SOCKETS_PER_USER))
        await self.accept()
        # Accepted first, so the browser sees the code (a refused handshake shows none).
        if not live_sockets.claim(user.pk, cap):
            self.dropping = True
            await self._send_json({"type": "error", "error": f"at most {cap} live sockets per user"})
            await self.close(code=CLOSE_TOO_MANY_SOCKETS)
            return
        self.claimed = user.pk
        await self.bind_session()  # logout or session expiry closes this socket

    async def disconnect(self, code: int) -> None:
        for task in (self.flush_task, self.stall_timer):
            if task is not None:
                task.cancel()
        self._release()
        await self.unbind_session()
        await self._leave_all()

    # --- client -> server ----------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.dropping:
            return  # closing: nothing more is answered or acknowledged
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
                await self._ack(message["ack"])
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
        await self._reply({"type": "subscribed", "groups": sorted(self.targets)})

    async def _unsubscribe(self, targets: list[Target]) -> None:
        for target in targets:
            if self.targets.pop(target.group, None) is not None:
                await self.channel_layer.group_discard(target.group, self.channel_name)
        await self._reply({"type": "subscribed", "groups": sorted(self.targets)})

    async def _ack(self, value: Any) -> None:
        if not isinstance(value, int) or isinstance(value, bool):
            raise SubscriptionError("ack takes the id of the last records message handled")
        if not self.outbox.ack(value):
            await self._refuse_ack()
            return
        if self.overflowed and not self.outbox.in_flight:
            await self._start_drop()  # it has caught up with what it was sent: tell it now
            return
        await self._send_held()
        self._schedule()

    async def _refuse_ack(self) -> None:
        """An ack of a message never sent: the client claims to read what it does not, so
        flow control cannot hold it; it is closed at once and nothing more is kept for it."""
        self.dropping = True
        if self.stall_timer is not None:
            self.stall_timer.cancel()
        await self._leave_all()
        self.outbox.clear()
        await self._send_json({"type": "error", "error": "ack names no records message sent on this socket"})
        await self.close(code=CLOSE_BAD_ACK)

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
        encoded = list(map(_encode, self._wanted(records)))
        nbytes = sum(map(len, encoded))
        if len(box.records) + len(encoded) > self.max_buffer or box.size + nbytes > self.max_buffer_bytes:
            self._overflow(len(encoded))
            return
        box.add(encoded)
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
        box.missed += box.clear() + arriving
        if not box.in_flight:  # nothing in flight to wait for
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
        box.missed += box.clear()
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
        box.missed += box.clear()
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
        budget = min(MAX_MESSAGE_BYTES, self.window_bytes) - _ENVELOPE
        while box.records:
            if self.dropping or self.overflowed:
                return  # live_drop counts what is left
            if box.in_flight and (len(box.in_flight) >= self.window or box.unread + budget > self.window_bytes):
                return  # the client lags: keep buffering; its next ack reschedules
            parts = box.take(budget)
            if not parts:
                continue  # only oversized records, counted as missed
            await self.send(text_data=box.records_message(parts).decode())
        if box.missed > box.reported:  # oversized records just skipped
            missed = box.missed - box.reported
            box.reported = box.missed
            await self._send_json({"type": "gap", "missed": missed})
        box.pushed_keys, box.keys = box.keys, set()
        box.last_push = time.monotonic()

    async def _leave_all(self) -> None:
        for group in list(getattr(self, "targets", {})):
            await self.channel_layer.group_discard(group, self.channel_name)
        if hasattr(self, "targets"):
            self.targets.clear()

    async def _error(self, message: str) -> None:
        await self._reply({"type": "error", "error": message})

    async def _reply(self, payload: dict[str, Any]) -> None:
        """An answer to the client's message, within its unread bytes (see the module doc)."""
        data = json.dumps(payload, separators=(",", ":"))
        if payload["type"] == "subscribed":
            self.held = data  # it lists every group: the newest one says it all
            await self._send_held()
        elif self.outbox.unread + len(data) > self.window_bytes + CONTROL_BYTES:
            log.warning("live client %s reads nothing of what it is sent: dropped", self.channel_name)
            await self._start_drop()
        else:
            await self._send_json(payload)

    async def _send_held(self) -> None:
        held, box = self.held, self.outbox
        if held is None or self.dropping:
            return
        if box.unread + len(held) <= self.window_bytes + CONTROL_BYTES:
            self.held = None
            box.sent(len(held))
            await self.send(text_data=held)
        elif not box.in_flight:  # nothing it could acknowledge: ask it to, with an empty message
            await self.send(text_data=box.records_message([]).decode())

    async def _send_json(self, payload: dict[str, Any]) -> None:
        data = json.dumps(payload, separators=(",", ":"))
        if hasattr(self, "outbox"):
            self.outbox.sent(len(data))
        await self.send(text_data=data)

"""The live websocket `/ws/live/`: pushes newly ingested records to subscribed browsers.

Protocol (docs/api.md, "Live websocket"): the client sends
``{"subscribe": {"host": H, "conn": U, "alerts": true, "kind": [...]}}`` and
``{"unsubscribe": {...}}``; each target (host H, connection U, the alert stream)
is one channel-layer group (``host.<H>``, ``conn.<U>``, ``alerts``) joined on
subscribe and left on unsubscribe or disconnect, with its own kind filter.
Ingest's ``group_send`` of ``{"type": "trace.batch", "records": [...]}`` lands in
``trace_batch``; records are buffered and pushed at most PUSH_HZ times a second as
``{"type": "records", "id": n, "records": [...]}``, so a burst makes a few messages.

Flow control: a client that acknowledges (``{"ack": n}``, cumulative) gets at most
`window` unacknowledged messages in flight; while it lags, records wait in the
buffer, and once the buffer exceeds `max_buffer` records the client is dropped from
its groups and closed (4008) so a slow browser never holds up ingest or memory.
A client that never acks is not flow-controlled (the server cannot see its speed).

Keep in sync with: the ingest view's group_send (group names, message type),
webapp/dashboard/static/dashboard/js/common.js (the client) and docs/api.md.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from translators.records import BY_KIND
from webapp.traces.push import group_name
from webapp.traces.session_close import SessionBound

PUSH_HZ = 10
MAX_RECORDS_PER_MESSAGE = 25_000
DEFAULT_WINDOW = 4  # unacknowledged messages in flight, for clients that ack
DEFAULT_MAX_BUFFER = 200_000  # records waiting for one client before it is dropped
MAX_TARGETS = 1000  # subscriptions per connection: bounds what one client can make us hold
CLOSE_UNAUTHENTICATED = 4401
CLOSE_TOO_SLOW = 4008
CLOSE_BAD_MESSAGE = 4400
ALERTS_GROUP = "alerts"


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
    """Records waiting to be pushed to one client, with the flow-control counters."""

    records: list[dict[str, Any]] = field(default_factory=list)
    # Keys of buffered and last-pushed records: a record reaching us through two groups
    # (host.H and conn.U) comes in two messages sent back to back by ingest.
    keys: set[tuple[Any, ...]] = field(default_factory=set)
    pushed_keys: set[tuple[Any, ...]] = field(default_factory=set)
    sent_id: int = 0
    acked_id: int = 0
    acks: bool = False  # the client acknowledges, so it is flow-controlled
    last_push: float = 0.0


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
        self.dropped = False
        await self.accept()
        await self.bind_session()  # logout or session expiry closes this socket

    async def disconnect(self, code: int) -> None:
        task = getattr(self, "flush_task", None)  # absent when connect() refused the handshake
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
            else:
                raise SubscriptionError("expected subscribe, unsubscribe or ack")
        except SubscriptionError as exc:
            await self._error(str(exc))

    async def _subscribe(self, targets: list[Target]) -> None:
        if len(set(self.targets) | {t.group for t in targets}) > MAX_TARGETS:
            raise SubscriptionError(f"at most {MAX_TARGETS} subscriptions per connection")
        for target in targets:
            if target.group not in self.targets:
                await self.channel_layer.group_add(target.group, self.channel_name)
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
        self.outbox.acks = True
        self.outbox.acked_id = max(self.outbox.acked_id, min(value, self.outbox.sent_id))
        self._schedule()

    # --- channel layer -> client ------------------------------------------------------------

    async def trace_batch(self, event: dict[str, Any]) -> None:
        """Ingest's group_send: keep the records this client subscribed to, push soon."""
        if self.dropped:
            return
        box = self.outbox
        targets = list(self.targets.values())
        records = event.get("records", ())
        if len(targets) == 1:  # the common case: one filter, and no record can come twice
            box.records.extend(filter(targets[0].matches, records))
        else:
            for record in records:
                if not any(t.matches(record) for t in targets):
                    continue
                key = (record.get("host_id"), record.get("boot_id"), record.get("seq"), record.get("kind"))
                if key in box.keys or key in box.pushed_keys:
                    continue
                box.keys.add(key)
                box.records.append(record)
        if len(box.records) > self.max_buffer:
            await self._drop_slow_client()
            return
        self._schedule()

    def _schedule(self) -> None:
        if self.outbox.records and (self.flush_task is None or self.flush_task.done()):
            self.flush_task = asyncio.ensure_future(self._flush_later())

    async def _flush_later(self) -> None:
        wait = self.outbox.last_push + 1.0 / PUSH_HZ - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        await self._flush()

    async def _flush(self) -> None:
        box = self.outbox
        while box.records and not self.dropped:
            if box.acks and box.sent_id - box.acked_id >= self.window:
                return  # the client lags: keep buffering; its next ack reschedules
            chunk = box.records[:MAX_RECORDS_PER_MESSAGE]
            del box.records[:MAX_RECORDS_PER_MESSAGE]
            box.sent_id += 1
            await self._send_json({"type": "records", "id": box.sent_id, "records": chunk})
        box.pushed_keys, box.keys = box.keys, set()
        box.last_push = time.monotonic()

    async def _drop_slow_client(self) -> None:
        self.dropped = True
        self.outbox.records.clear()
        self.outbox.keys.clear()
        self.outbox.pushed_keys.clear()
        await self._leave_all()  # at once: ingest must stop fanning out to us
        await self._send_json({"type": "error", "error": "client too slow: disconnected"})
        await self.close(code=CLOSE_TOO_SLOW)

    async def _leave_all(self) -> None:
        for group in list(getattr(self, "targets", {})):
            await self.channel_layer.group_discard(group, self.channel_name)
        if hasattr(self, "targets"):
            self.targets.clear()

    async def _error(self, message: str) -> None:
        await self._send_json({"type": "error", "error": message})

    async def _send_json(self, payload: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(payload, separators=(",", ":")))

"""Announces stored records to the channel layer, for the live websocket.

Groups: ``host.<host_id>`` (every record of the host), ``conn.<conn_uuid>`` (records
of one connection), ``alerts`` (alert records). Message: ``{"type": "trace.batch",
"records": [to_builtins(record), ...], "group": G, "sender": S, "offset": N}`` -- the
consumer's ``trace_batch`` handler receives it. ``offset`` counts the records this
process (``sender``, random per process) sent to group G before this message, so a
consumer sees a message the channel layer dropped (a full channel drops silently) as a
jump and tells its browser how many records it missed. A failed send is logged, never
raised into ingest: the records are stored, and the offsets already count them. Group names allow only ASCII letters, digits, ``-_.``; other
characters of a host id become ``_``.
Keep in sync with the live consumer (webapp/*/consumers.py) and docs/webapp.md.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

from translators.records import BY_KIND, Record

MESSAGE_TYPE = "trace.batch"
CHUNK = 1000  # records per message: bounded messages whatever the batch size
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
SENDER = uuid.uuid4().hex
MAX_OFFSETS = 100_000  # groups whose offsets are kept; a forgotten group restarts at 0 (consumers rebase)
_offsets: OrderedDict[str, int] = OrderedDict()
log = logging.getLogger(__name__)


def group_name(prefix: str, ident: str) -> str:
    # Channels caps group names below 100 characters.
    return f"{prefix}.{_UNSAFE.sub('_', ident)}"[:99]


def groups_for(records: Sequence[Record], wanted: Callable[[str], bool] = lambda group: True) -> dict[str, list[Any]]:
    """Payloads per group; `wanted` skips groups known to have no listener."""
    # One pass collects record indexes per host and per connection; group names are
    # then built once per distinct key, not once per record.
    by_key: dict[tuple[str, str], list[int]] = {}
    alerts: list[int] = []
    alert_type = BY_KIND["alert"]
    for index, rec in enumerate(records):
        by_key.setdefault(("host", rec.host_id), []).append(index)
        if rec.conn_uuid is not None:
            by_key.setdefault(("conn", rec.conn_uuid), []).append(index)
        if type(rec) is alert_type:
            alerts.append(index)
    members: dict[str, list[int]] = {}
    for key, indexes in by_key.items():
        name = group_name(*key)
        if wanted(name):
            # Two host ids can share a group name ("a b", "a_b"): keep record order.
            members[name] = sorted(members[name] + indexes) if name in members else indexes
    if alerts and wanted("alerts"):
        members["alerts"] = alerts
    if not members:
        return {}
    payloads: list[Any] = msgspec.to_builtins(list(records))  # one C call for the batch
    return {group: [payloads[i] for i in indexes] for group, indexes in members.items()}


class PushFailed(Exception):
    """A strict push could not reach the channel layer; the offsets of what was not sent were taken back."""


def push(records: Sequence[Record], strict: bool = False) -> None:
    """Send the records to their groups.

    Not strict (ingest on the appliance): a failure is logged and the offsets stay
    moved on, so subscribers see the gap. Strict (the scale-out writer, which keeps
    its stream entry pending and pushes the batch again): the offsets of the messages
    not sent are taken back and PushFailed is raised, so the retry continues the
    sequence and subscribers see every record, some of them twice.
    """
    layer = get_channel_layer()
    if layer is None or not records:
        return
    wanted = _listened(layer)
    if wanted is None:
        return  # nobody is listening: no per-record work at all
    try:
        async_to_sync(_send)(layer, groups_for(records, wanted), strict)
    except Exception as exc:
        if strict:
            raise PushFailed(f"live push of {len(records)} records failed: {exc!r}") from exc
        # Stored is stored: a 500 here would make the collector resend a committed batch.
        # The offsets moved on, so subscribers see the gap and their browsers say so.
        log.exception("live push of %d records failed", len(records))


def listening() -> bool:
    """False when push() would send nothing (no channel layer, or the in-memory one with
    no browser listening): the scale-out writer then skips decoding whole records."""
    layer = get_channel_layer()
    return layer is not None and _listened(layer) is not None


def _listened(layer: Any) -> Callable[[str], bool] | None:
    # The in-memory layer (one process, the embedded default) shows its groups: sending
    # to the many per-connection groups nobody watches is skipped, and so is the whole
    # push while no browser listens (None). Other layers cannot tell, so every group
    # gets its message.
    groups = getattr(layer, "groups", None)
    if isinstance(layer, InMemoryChannelLayer) and isinstance(groups, dict):
        if not any(groups.values()):
            return None
        return lambda group: bool(groups.get(group))
    return lambda group: True


def _advance(group: str, count: int) -> int:
    """The group's offset before `count` more records, moved past them."""
    offset = _offsets.pop(group, 0)
    _offsets[group] = offset + count  # most recently used last
    if len(_offsets) > MAX_OFFSETS:
        _offsets.popitem(last=False)
    return offset


async def _send(layer: Any, groups: dict[str, list[dict[str, Any]]], take_back: bool = False) -> None:
    messages: list[tuple[str, dict[str, Any]]] = []
    for group, payloads in groups.items():
        for start in range(0, len(payloads), CHUNK):
            chunk = payloads[start : start + CHUNK]
            offset = _advance(group, len(chunk))
            messages.append(
                (group, {"type": MESSAGE_TYPE, "records": chunk, "group": group, "sender": SENDER, "offset": offset})
            )
    sent = 0
    try:
        for group, message in messages:  # offsets are taken first: a failed send still counts
            await layer.group_send(group, message)
            sent += 1
    except Exception:
        if take_back:  # newest first, so each group ends at its first message not sent
            for group, message in reversed(messages[sent:]):
                _offsets[group] = message["offset"]
        raise

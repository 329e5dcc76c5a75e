"""Announces stored records to the channel layer, for the live websocket.

Groups: ``host.<host_id>`` (every record of the host), ``conn.<conn_uuid>`` (records
of one connection), ``alerts`` (alert records). Message: ``{"type": "trace.batch",
"records": [to_builtins(record), ...]}`` -- the consumer's ``trace_batch`` handler
receives it. Group names allow only ASCII letters, digits, ``-_.``; other
characters of a host id become ``_``.
Keep in sync with the live consumer (webapp/*/consumers.py) and docs/webapp.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from translators.records import Record, to_builtins

MESSAGE_TYPE = "trace.batch"
CHUNK = 1000  # records per message: bounded messages whatever the batch size
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def group_name(prefix: str, ident: str) -> str:
    # Channels caps group names below 100 characters.
    return f"{prefix}.{_UNSAFE.sub('_', ident)}"[:99]


def groups_for(records: Sequence[Record]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        payload = to_builtins(rec)
        groups.setdefault(group_name("host", rec.host_id), []).append(payload)
        if rec.conn_uuid is not None:
            groups.setdefault(group_name("conn", rec.conn_uuid), []).append(payload)
        if rec.kind == "alert":
            groups.setdefault("alerts", []).append(payload)
    return groups


def push(records: Sequence[Record]) -> None:
    layer = get_channel_layer()
    if layer is None or not records:
        return
    async_to_sync(_send)(layer, groups_for(records))


async def _send(layer: Any, groups: dict[str, list[dict[str, Any]]]) -> None:
    for group, payloads in groups.items():
        for start in range(0, len(payloads), CHUNK):
            await layer.group_send(group, {"type": MESSAGE_TYPE, "records": payloads[start : start + CHUNK]})

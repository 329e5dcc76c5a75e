"""Helpers for the live websocket's WebsocketCommunicator tests (the real Channels stack
of webapp.asgi): a logged-in session cookie, hand-made records, a group_send as ingest
makes it, a connected and subscribed client. Used by tests/test_live_*.py."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client

from webapp.asgi import application

ORIGIN = (b"origin", b"http://127.0.0.1")
BIG_LAYER = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 10_000}}}


async def login_cookie(username: str) -> tuple[bytes, bytes]:
    """A `Cookie` header of a fresh session of user `username` (made on first use)."""
    return await sync_to_async(_login_cookie)(username)


def _login_cookie(username: str) -> tuple[bytes, bytes]:
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        user = get_user_model().objects.create_user(username, password="not-used-here")
    client = Client()
    client.force_login(user)
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


def records(host: str, start: int, count: int, kind: str = "tcp_state", pad: int = 0) -> list[dict[str, Any]]:
    """`count` records of `host` with seqs from `start`; `pad` characters of comm make each bigger."""
    return [
        {"kind": kind, "host_id": host, "boot_id": "b", "seq": seq, "conn_uuid": f"conn-{seq % 3}", "ts_wall": 1.0,
         "comm": "x" * pad}
        for seq in range(start, start + count)
    ]  # fmt: skip


async def batch(group: str, recs: list[dict[str, Any]]) -> None:
    await get_channel_layer().group_send(group, {"type": "trace.batch", "records": recs})


async def connect(cookie: tuple[bytes, bytes], subscribe: dict[str, Any] | None = None) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(application, "/ws/live/", headers=[ORIGIN, cookie, (b"host", b"127.0.0.1")])
    connected, code = await comm.connect(timeout=10)
    assert connected, f"refused with {code}"
    if subscribe is not None:
        await comm.send_json_to({"subscribe": subscribe})
        assert (await comm.receive_json_from(timeout=10))["type"] == "subscribed"
    return comm


def members(group: str) -> int:
    """Channels in `group` of the in-memory layer."""
    return len(get_channel_layer().groups.get(group, {}))

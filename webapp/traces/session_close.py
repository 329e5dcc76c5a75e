"""A websocket lives only as long as the login session it was opened with.

Each live socket joins the channel-layer group of its session (``session.<digest>``,
a digest so the session key itself never reaches the channel layer). Logging out
sends ``session.ended`` to that group and every socket of the session closes with
4401 at once; a session that expires, is deleted or whose user changed password is
found by a re-check every SESSION_CHECK_S seconds (NETTRAIL_LIVE_SESSION_CHECK_S in
settings for tests), and its sockets close the same way.
Used by webapp/traces/consumers.py; the logout receiver is connected in apps.py.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.http import HttpRequest

SESSION_CHECK_S = 30.0
CLOSE_SESSION_ENDED = 4401


def session_group(session_key: str) -> str:
    return "session." + hashlib.sha256(session_key.encode()).hexdigest()[:40]


def on_logout(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    """user_logged_out receiver: runs before Django flushes the session, so its key is known."""
    key = getattr(getattr(request, "session", None), "session_key", None)
    layer = get_channel_layer()
    if key and layer is not None:
        async_to_sync(layer.group_send)(session_group(key), {"type": "session.ended"})


class SessionBound:
    """Mixin for an AsyncWebsocketConsumer: call bind_session() once accepted, unbind on disconnect."""

    scope: dict[str, Any]
    channel_layer: Any
    channel_name: str
    _session_group: str | None = None
    _session_watch: asyncio.Task[None] | None = None
    close: Callable[..., Awaitable[None]]  # AsyncWebsocketConsumer's

    async def bind_session(self) -> None:
        session = self.scope.get("session")
        key = getattr(session, "session_key", None)
        if not key:
            return
        self._session_group = session_group(key)
        await self.channel_layer.group_add(self._session_group, self.channel_name)
        self._session_watch = asyncio.ensure_future(self._watch(key))

    async def unbind_session(self) -> None:
        if self._session_watch is not None:
            self._session_watch.cancel()
        if self._session_group is not None:
            await self.channel_layer.group_discard(self._session_group, self.channel_name)
            self._session_group = None

    async def session_ended(self, event: dict[str, Any]) -> None:
        """Logout of this socket's session (channel-layer type ``session.ended``)."""
        await self.unbind_session()
        await self.close(code=CLOSE_SESSION_ENDED)

    async def _watch(self, key: str) -> None:
        from webapp.gate import session_is_logged_in

        every = float(getattr(settings, "NETTRAIL_LIVE_SESSION_CHECK_S", SESSION_CHECK_S))
        while True:
            await asyncio.sleep(every)
            if not await session_is_logged_in(key):
                self._session_watch = None  # this task: nothing to cancel
                await self.session_ended({})
                return

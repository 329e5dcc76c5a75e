"""A websocket lives only as long as the login session it was opened with.

Each live socket joins the channel-layer group of its session (``session.<digest>``,
a digest so the session key itself never reaches the channel layer). Logging out
sends ``session.ended`` to that group and every socket of the session closes with
4401 at once. Expiry closes them at once too: each socket sleeps until its session's
stored expiry time (re-read on waking, so a session whose expiry moved on, as on
activity when sessions slide, re-arms the timer), and a session deleted or whose user
changed password is found by a re-check every SESSION_CHECK_S seconds
(NETTRAIL_LIVE_SESSION_CHECK_S in settings for tests); its sockets close the same way.
Used by webapp/traces/consumers.py; the logout receiver is connected in apps.py.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from datetime import datetime
from importlib import import_module
from typing import Any, cast

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.http import HttpRequest
from django.utils import timezone

SESSION_CHECK_S = 30.0
# Wake this long after the stored expiry, so the check that follows finds it past.
EXPIRY_MARGIN_S = 0.05
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
            expiry = await session_expiry(key)
            left = every if expiry is None else (expiry - timezone.now()).total_seconds() + EXPIRY_MARGIN_S
            await asyncio.sleep(min(every, max(0.0, left)))
            if not await session_is_logged_in(key):
                self._session_watch = None  # this task: nothing to cancel
                await self.session_ended({})
                return


@database_sync_to_async
def session_expiry(key: str) -> datetime | None:
    """The stored expiry time of a database-backed session (None: unknown, or no such session).

    Read from the row, not ``SessionStore.get_expiry_date()``: without a custom expiry
    that method answers "now plus SESSION_COOKIE_AGE", as if the session were saved now.
    """
    model_class = getattr(import_module(settings.SESSION_ENGINE).SessionStore, "get_model_class", None)
    if model_class is None:  # a cookie or cache session: the periodic re-check alone
        return None
    found = model_class().objects.filter(session_key=key).values_list("expire_date", flat=True).first()
    return cast("datetime | None", found)

"""ASGI guard: refuse an oversized ingest body before Django reads any of it.

Django's ASGI handler spools the whole request body (to a temporary file when
large) before a view runs, so the ingest view's own 413 would come only after an
anonymous client had uploaded everything. This wrapper answers 413 at once when
Content-Length is over NETTRAIL_INGEST_MAX_BYTES, and cuts a chunked body off
(as a client disconnect) once it passes the limit. Only for the ingest path:
other uploads (capture files) have their own size rules.
Keep in sync with webapp/traces/ingest.py (same limit, same JSON error shape).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

INGEST_PATH = "/api/ingest"


class IngestBodyLimit:
    def __init__(self, app: ASGIApp, limit: Callable[[], int]) -> None:
        self.app = app
        self.limit = limit  # read per request, so test settings overrides apply

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != INGEST_PATH:
            await self.app(scope, receive, send)
            return
        limit = self.limit()
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _too_large(send, limit)
            return
        await self.app(scope, _capped(receive, limit), send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None


def _capped(receive: Receive, limit: int) -> Receive:
    seen = 0

    async def capped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                return {"type": "http.disconnect"}  # Django stops reading and answers nothing
        return message

    return capped


async def _too_large(send: Send, limit: int) -> None:
    body = json.dumps({"error": f"body over {limit} bytes"}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})

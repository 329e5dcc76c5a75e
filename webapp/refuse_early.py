"""ASGI wrapper: refuse a request before its body is read (policy in webapp/gate.py).

Django's ASGI handler spools the whole request body (to a temporary file when
large) before any middleware or view runs, so a 401 or 413 from Django would come
only after an anonymous client had uploaded everything. This wrapper answers from
the request head: anonymous with a body, or over the path's size limit by
Content-Length, and cuts a body sent without a length (chunked) at the limit with a
413 (Django is told the client went away, and answers nothing more).

Under daphne this layer alone is too late (Twisted reads the body before calling
any ASGI application): webapp/daphne_gate.py applies the same policy there.
Keep in sync with webapp/traces/ingest.py (same limit, same JSON error shape).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from webapp import gate

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class RefuseEarly:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        verdict = await gate.check(dict(scope))
        if isinstance(verdict, gate.Refusal):
            await send_refusal(send, verdict)
            return
        cap = _Cap(receive, send, verdict.limit)
        await self.app(scope, cap.receive, cap.send)


async def send_refusal(send: Send, refusal: gate.Refusal) -> None:
    await send({"type": "http.response.start", "status": refusal.status, "headers": refusal.headers()})
    await send({"type": "http.response.body", "body": refusal.body()})


class _Cap:
    """Counts the body as the application reads it; past the limit, answers 413 itself."""

    def __init__(self, receive: Receive, send: Send, limit: int) -> None:
        self._receive, self._send, self.limit = receive, send, limit
        self.seen = 0
        self.started = False

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.request":
            self.seen += len(message.get("body", b""))
            if self.seen > self.limit:
                if not self.started:
                    self.started = True
                    await send_refusal(self._send, gate.too_large(self.limit))
                return {"type": "http.disconnect"}  # Django stops reading and answers nothing
        return message

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            if self.started:
                return  # our 413 went out first
            self.started = True
        elif self.seen > self.limit:
            return
        await self._send(message)

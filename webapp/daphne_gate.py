"""Refuse early under daphne: apply webapp/gate.py as soon as a request's headers are in.

Daphne's Twisted layer reads a request's whole body (into a temporary file when
large) and only then builds the ASGI scope and calls the application, so the ASGI
wrapper (webapp/refuse_early.py) alone would refuse a 1 GiB anonymous POST only
after reading it. ``GatedRequest`` hooks Twisted's request where the headers are
complete (``gotLength``): it stops reading the socket while the gate decides (a
database look-up of the token or session runs off the reactor), and either lets the
request go on as daphne's own, or writes the refusal, shuts the connection for
writing and never reads the rest of the body. Body bytes are counted as they arrive,
so a chunked body is cut with a 413 at the path's limit.

Installed by ``install()`` (webapp/serve.py) before daphne's server starts.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast
from urllib.parse import unquote

import daphne.server
from daphne.http_protocol import HTTPFactory, WebRequest

from webapp import gate

log = logging.getLogger(__name__)
# After a refusal the write side is closed at once (the client sees the answer and
# its end); the read side is dropped after this long without reading another byte.
LINGER_S = 2.0


class GatedRequest(WebRequest):  # daphne is untyped: WebRequest is Any
    _gate_limit: int | None = None
    _gate_seen = 0
    _gate_refused = False
    _gate_pending = False
    _gate_held: tuple[Any, ...] | None = None

    def gotLength(self, length: int | None) -> None:
        super().gotLength(length)
        scope = _head_scope(self)
        try:
            head = gate.decide_head(scope)
        except Exception:  # a settings or URL error must not leave the socket hanging
            log.exception("refuse-early gate failed")
            head = gate.Refusal(500, "server error")
        if isinstance(head, gate.Refusal):
            self.requestHeaders.removeHeader(b"expect")  # no "100 Continue" after the answer
            self._refuse(head)
            return
        self._gate_limit = head.limit
        if isinstance(head, gate.Credential):
            self._gate_pending = True
            self.channel.transport.pauseProducing()  # read no body until the credential is checked
            future = asyncio.ensure_future(gate.verify(head))
            future.add_done_callback(self._verified)

    def _verified(self, future: asyncio.Future[gate.Verdict]) -> None:
        self._gate_pending = False
        if self._gate_refused or self.channel is None:
            return
        try:
            verdict = future.result()
        except Exception:
            log.exception("refuse-early credential check failed")
            verdict = gate.Refusal(503, "could not check the credentials")
        if isinstance(verdict, gate.Refusal):
            self._refuse(verdict)
            return
        self.channel.transport.resumeProducing()
        if self._gate_held is not None:  # the whole (small) body came with the headers
            held, self._gate_held = self._gate_held, None
            super().requestReceived(*held)

    def handleContentChunk(self, data: bytes) -> None:
        if self._gate_refused:
            return
        self._gate_seen += len(data)
        if self._gate_limit is not None and self._gate_seen > self._gate_limit:
            self._refuse(gate.too_large(self._gate_limit))
            return
        super().handleContentChunk(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if self._gate_refused:
            return
        if self._gate_pending:
            self._gate_held = (command, path, version)
            return
        super().requestReceived(command, path, version)

    def _refuse(self, refusal: gate.Refusal) -> None:
        self._gate_refused = True
        channel = self.channel
        channel.persistent = False
        transport = channel.transport
        transport.pauseProducing()
        transport.write(refusal.http11())
        # Half-close: the answer and a FIN reach the client, while the unread body stays
        # in the kernel (closing with unread data would send a reset that can destroy
        # the answer on its way).
        lose_write = getattr(transport, "loseWriteConnection", None)
        if lose_write is not None:
            from twisted.internet import reactor  # daphne.server installed the asyncio reactor

            lose_write()
            cast(Any, reactor).callLater(LINGER_S, transport.abortConnection)  # typed as the interface
        else:
            transport.loseConnection()


def _head_scope(request: GatedRequest) -> dict[str, Any]:
    channel = request.channel
    raw_path = bytes(getattr(channel, "_path", b"/")).split(b"?", 1)[0]
    headers = [(name.lower(), value) for name, values in request.requestHeaders.getAllRawHeaders() for value in values]
    return {
        "type": "http",
        "method": bytes(getattr(channel, "_command", b"")).decode("ascii", "replace"),
        "path": unquote(raw_path.decode("ascii", "replace")),
        "headers": headers,
    }


class GatedHTTPFactory(HTTPFactory):  # daphne is untyped: HTTPFactory is Any
    def buildProtocol(self, addr: Any) -> Any:
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = GatedRequest
        return protocol


def install() -> None:
    """Make daphne's Server build its HTTP protocol with GatedRequest.

    ``daphne.server.Server.run`` builds ``HTTPFactory(self)`` by that global name and
    has no other hook, so the name is pointed at the subclass.
    """
    daphne.server.HTTPFactory = GatedHTTPFactory

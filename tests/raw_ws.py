"""A websocket client on a plain blocking socket that reads only when told to: the lying
and stalled clients of tests/test_live_lying_client_daphne.py.

A library client reads its socket continuously in the background; an attacker's does
not. This one does the handshake and frames with websockets' sans-I/O protocol, sends
what it is told, and reads nothing until `drain()`, with a small receive buffer so the
server's unread data stays on the server.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field
from typing import Any

from websockets.client import ClientProtocol
from websockets.frames import Opcode
from websockets.http11 import Response
from websockets.protocol import State
from websockets.uri import parse_uri


@dataclass
class Drained:
    """What a client read once it read everything: its text messages and how it ended."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    close_code: int | None = None  # the server's close frame, when it was read
    reset: bool = False  # the server dropped the connection (unread data discarded)


class RawClient:
    def __init__(self, port: int, cookie: str, origin: str, rcvbuf: int = 4096) -> None:
        self.sock = socket.socket()
        # Before connect: the window the kernel offers the server follows it.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(60)
        self.sock.connect(("127.0.0.1", port))
        self.proto = ClientProtocol(parse_uri(f"ws://127.0.0.1:{port}/ws/live/"), max_size=None)
        request = self.proto.connect()
        request.headers["Cookie"] = cookie
        request.headers["Origin"] = origin
        self.proto.send_request(request)
        self._write()
        self.send_failed = False
        events: list[Any] = []
        while not any(isinstance(e, Response) for e in events):
            data = self.sock.recv(4096)  # the handshake's answer only: the server sends nothing else yet
            assert data, "the server closed during the handshake"
            self.proto.receive_data(data)
            events += self.proto.events_received()
        assert self.proto.state is State.OPEN, self.proto.handshake_exc

    def _write(self) -> None:
        for data in self.proto.data_to_send():
            if data:
                self.sock.sendall(data)

    def send_json(self, payload: dict[str, Any]) -> bool:
        """Send one message; False once the server has gone (the socket refuses it)."""
        if self.send_failed:
            return False
        self.proto.send_text(json.dumps(payload).encode())
        try:
            self._write()
        except OSError:
            self.send_failed = True
        return not self.send_failed

    def drain(self, timeout: float = 60) -> Drained:
        """Read until the server closes the connection (EOF or reset), at most `timeout` s."""
        out = Drained()
        self.sock.settimeout(timeout)
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except ConnectionResetError:
                out.reset = True
                break
            if not data:
                break
            self.proto.receive_data(data)
            for frame in self.proto.events_received():
                if frame.opcode is Opcode.TEXT:
                    out.messages.append(json.loads(frame.data))
        if self.proto.close_rcvd is not None:
            out.close_code = self.proto.close_rcvd.code
        return out

    def close(self) -> None:
        self.sock.close()

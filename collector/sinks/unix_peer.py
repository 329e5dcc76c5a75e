"""HTTP over a Unix socket to a server whose account is checked before anything is sent.

The local collector of ``nettrail up`` ships to ``--server unix:PATH`` (the webapp's
socket in its data directory) instead of a TCP port on loopback: a port the webapp
left (stopped, restarting) can be taken by any local user, who would then receive the
host's token and could answer ``tracing`` requests. On a Unix socket the kernel tells
who holds the other end (``SO_PEERCRED``): every connection checks that the server
process runs as the expected account (``--server-user``, default ``nettrail``) and
closes without writing a byte when it does not.

Used by collector/sinks/http.py (mounted on its requests session for ``http+unix://``)
and http_transport.check_server_url. Keep in sync with docs/collector-sinks.md.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
import struct
from typing import Any, NoReturn

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection
from urllib3.connectionpool import HTTPConnectionPool

log = logging.getLogger("nettrail.sink.unix")

URL_BASE = "http+unix://localhost"  # the Host header the webapp's ALLOWED_HOSTS takes

PEERCRED = struct.Struct("3i")  # pid, uid, gid


class ImpostorError(ConnectionError):
    """The process holding the socket is not the server's account: nothing was sent."""


def peer_uid(sock: socket.socket) -> int:
    _, uid, _ = PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, PEERCRED.size))
    return int(uid)


class _PeerCheckedConnection(HTTPConnection):
    """An HTTP connection whose socket is the Unix socket, checked before the request."""

    def __init__(self, *args: Any, socket_path: str, uid: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._socket_path = socket_path
        self._uid = uid

    def _new_conn(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout if isinstance(self.timeout, (int, float)) else None)
            self._connect(sock)
        except BaseException:
            sock.close()
            raise
        return sock

    def _connect(self, sock: socket.socket) -> None:
        """Connect to the socket file itself (a symlink there is refused, not followed: root
        connects to nothing its owner points at), then check who holds the other end."""
        try:
            fd = os.open(self._socket_path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            raise ConnectionRefusedError(f"no server socket at {self._socket_path}") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISSOCK(info.st_mode) or info.st_uid != self._uid:
                self._refuse(f"{self._socket_path} is not a socket of uid {self._uid} (a {_kind(info)} of uid "
                             f"{info.st_uid})")  # fmt: skip
            sock.connect(f"/proc/self/fd/{fd}")  # the very file checked above
        finally:
            os.close(fd)
        found = peer_uid(sock)
        if found != self._uid:
            self._refuse(f"the process on {self._socket_path} runs as uid {found}, not the webapp's uid {self._uid}")

    def _refuse(self, why: str) -> NoReturn:
        log.error("%s: not sending it the token", why)  # said here: requests reports only a failed connection
        raise ImpostorError(f"{why}: not sending it the token")


def _kind(info: os.stat_result) -> str:
    return "symlink" if stat.S_ISLNK(info.st_mode) else "socket" if stat.S_ISSOCK(info.st_mode) else "file"


class _PeerCheckedPool(HTTPConnectionPool):
    ConnectionCls = _PeerCheckedConnection  # given socket_path and uid through the pool's conn_kw


class UnixPeerAdapter(HTTPAdapter):
    """A requests adapter for ``http+unix://localhost/...`` URLs: one pool on `path`,
    each new connection checked for the peer's `uid` before it carries a request."""

    def __init__(self, path: str, uid: int) -> None:
        self._pool = _PeerCheckedPool("localhost", maxsize=2, socket_path=path, uid=uid)
        super().__init__()

    def get_connection_with_tls_context(
        self, request: requests.PreparedRequest, verify: bool | str | None, proxies: Any = None, cert: Any = None
    ) -> HTTPConnectionPool:
        return self._pool

    def close(self) -> None:
        self._pool.close()
        super().close()

"""``unix:PATH`` server URLs and the server's account: the parts a command checks at start.

Kept apart from collector/sinks/unix_peer.py (the requests adapter that connects and checks
the peer) so that parsing ``--server`` costs no import of requests: `nettrail analyze`
starts without it (tests/test_analyze_startup.py).
"""

from __future__ import annotations

import pwd

SCHEME = "unix:"
DEFAULT_SERVER_USER = "nettrail"  # the account `nettrail up` runs the webapp as
MAX_PATH = 107  # sun_path holds 108 bytes with its NUL


def socket_path(url: str) -> str | None:
    """PATH of a ``unix:PATH`` server, else None."""
    return url[len(SCHEME) :] if url.startswith(SCHEME) else None


def check_socket_url(url: str) -> str:
    """The socket's path; ValueError when it cannot be one."""
    path = socket_path(url) or ""
    if not path.startswith("/"):
        raise ValueError(f"--server {url}: give unix:/absolute/path/to/socket")
    if len(path.encode()) > MAX_PATH:
        raise ValueError(f"--server {url}: a Unix socket path is at most {MAX_PATH} bytes")
    return path


def server_uid(user: str | None) -> int:
    """The uid the server must run as: --server-user NAME or UID (default nettrail)."""
    name = user or DEFAULT_SERVER_USER
    if name.isdigit():
        return int(name)
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        raise ValueError(f"--server-user {name}: no such user (the account the webapp runs as)") from None

"""Open live websockets per user, in this process: the cap behind close code 4429.

Each socket claims a place when it connects and releases it when it disconnects, so a
user cannot make one server process hold more than NETTRAIL_LIVE_SOCKETS_PER_USER
sockets (and their outboxes). Counted per ASGI process: with several workers
(`nettrail serve`) a user may hold the cap in each. Consumers all run on the server's
one event loop, so a plain counter needs no lock.
Used by webapp/traces/consumers.py; documented in docs/api.md.
"""

from __future__ import annotations

from collections import Counter

_open: Counter[object] = Counter()


def claim(user_key: object, cap: int) -> bool:
    """Take a place for one more socket of this user; False when it has `cap` open already."""
    if _open[user_key] >= cap:
        return False
    _open[user_key] += 1
    return True


def release(user_key: object) -> None:
    _open[user_key] -= 1
    if _open[user_key] <= 0:
        del _open[user_key]


def open_sockets(user_key: object) -> int:
    return _open[user_key]

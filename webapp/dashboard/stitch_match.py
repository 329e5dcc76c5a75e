"""Which two Connection rows are the two ends of one TCP connection: the one rule.

Two rows are candidate ends when one's 4-tuple is the other's mirrored (its
src:sport is the other's dst:dport and the other way round, same protocol) and
their lifetimes overlap within `WINDOW` seconds (room for two hosts' clock
offset). Among several candidates the closest start wins. The opener (the side
whose socket connected) comes first.

Used by the connection page's Both ends panel (webapp/dashboard/stitched.py, which
also checks shared SIFTR segments to tell a reused tuple apart) and by the
Connections list, which shows a connection traced at both ends once (`fold`):
the list matches only among the rows of the page it builds, so it costs no query.
Keep in sync with docs/dashboard.md (Both ends of a connection).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import quote

from django.db.models import Q
from django.urls import reverse

from webapp.traces.models import Connection
from webapp.traces.tokens import CAPTURE_PREFIX

WINDOW = 600.0  # seconds: lifetimes this far apart may still be one connection on offset clocks

Tuple = tuple[str, str, int, str, int]


def _tuple(conn: Connection) -> Tuple | None:
    if conn.host_id.startswith(CAPTURE_PREFIX):
        return None  # an uploaded capture's row is a flow seen on a wire, not one socket's end
    if conn.src is None or conn.dst is None or conn.sport is None or conn.dport is None:
        return None  # a listening socket or an unconnected one: no peer to find
    return (conn.proto, conn.src, conn.sport, conn.dst, conn.dport)


def _mirrored(t: Tuple) -> Tuple:
    proto, src, sport, dst, dport = t
    return (proto, dst, dport, src, sport)


def overlaps(a: Connection, b: Connection) -> bool:
    return bool(b.first_seen <= a.last_seen + WINDOW and b.last_seen >= a.first_seen - WINDOW)


def matches(a: Connection, b: Connection) -> bool:
    """Could `b` be the other end of `a`? (mirrored tuple, overlapping lifetime)"""
    ta, tb = _tuple(a), _tuple(b)
    return ta is not None and tb == _mirrored(ta) and a.pk != b.pk and overlaps(a, b)


def candidates_q(conn: Connection) -> Q | None:
    """The same rule as `matches`, as a query (None: the row has no full tuple)."""
    t = _tuple(conn)
    if t is None:
        return None
    proto, src, sport, dst, dport = _mirrored(t)
    mirrored = ~Q(host_id__startswith=CAPTURE_PREFIX) & Q(proto=proto, src=src, sport=sport, dst=dst, dport=dport)
    return mirrored & Q(first_seen__lte=conn.last_seen + WINDOW, last_seen__gte=conn.first_seen - WINDOW)


def distance(a: Connection, b: Connection) -> float:
    """How far apart two candidate ends started: the closest is the likeliest peer."""
    return float(abs(a.first_seen - b.first_seen))


def opener_key(conn: Connection) -> tuple[int, str, str]:
    """Sort key putting the opener first (then by host and uuid): the same order from either end."""
    return (0 if conn.active else 1 if conn.active is None else 2, conn.host_id, conn.conn_uuid)


def link(conn: Connection) -> str:
    """The connection page of this end (a uuid is unique per host, so the page names the host)."""
    return f"{reverse('dashboard:connection', args=[conn.conn_uuid])}?host={quote(conn.host_id)}"


@dataclass
class Folded:
    rows: list[Connection]  # the page's rows, each connection once (the opener's end kept)
    peers: dict[int, Connection] = field(default_factory=dict)  # kept row's pk -> the other end's row
    folded: int = 0  # rows left out because their other end is shown


def fold(rows: list[Connection]) -> Folded:
    """Show a connection traced at both ends once: pairs among `rows` only (a page), closest
    starts first, each row in at most one pair; the opener's row stays where it was."""
    by_tuple: dict[Tuple, list[int]] = {}
    for i, c in enumerate(rows):
        t = _tuple(c)
        if t is not None:
            by_tuple.setdefault(t, []).append(i)
    pairs: list[tuple[float, int, int]] = []
    for i, c in enumerate(rows):
        t = _tuple(c)
        for j in by_tuple.get(_mirrored(t), []) if t is not None else []:
            if i < j and matches(c, rows[j]):
                pairs.append((distance(c, rows[j]), i, j))
    used: set[int] = set()
    out = Folded([])
    dropped: set[int] = set()
    for _, i, j in sorted(pairs):
        if i in used or j in used:
            continue
        used.update((i, j))
        keep, drop = sorted((i, j), key=lambda k: opener_key(rows[k]))
        out.peers[rows[keep].pk] = rows[drop]
        dropped.add(drop)
    out.rows = [c for i, c in enumerate(rows) if i not in dropped]
    out.folded = len(dropped)
    return out

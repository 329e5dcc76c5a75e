"""A connection's drops: those of its own socket and those of its packets where no socket
held them (issue 34 item 5).

The kernel names the socket of a dropped buffer when the buffer has one (skb->sk, or the
receiving socket on 6.12): such a drop carries the connection's conn_uuid. A packet dropped
on its way through this host (forwarded by a router namespace: PKT_TOO_BIG, a firewall
rule, no route) has no socket, but the skb provider reads its addresses, ports and
protocol from its own headers (kmod/skb.bpf.c, source first). Such a drop is this
connection's when its 4-tuple is the connection's, either direction, on the same host,
while the connection lived (from its first record, to its last one if it is closed: an
earlier or later connection with the same 4-tuple is not this one). The look-up is an
index range of skb_drop's (sport, dport, ts_wall) per direction (webapp/traces/schema.py).
Keep in sync with: js/connection.js (drops), webapp/dashboard/buffers.py (the Buffers
page's connection filter, which lists the same drops).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from webapp.dashboard.tables import SkbDrop
from webapp.traces.models import Connection

MAX_ROWS = 500
# Seconds around the connection's first and last records a socketless drop may fall in:
# a drop's wall time and a record's come from one clock, but the first record of a
# connection can follow the first packet dropped on its path by a scheduling delay.
SLACK_S = 1.0
COLUMNS = ("ts_wall", "drop_reason_str", "drop_location", "len", "skb_uid", "comm", "pid", "if_name", "l4_proto")
COLUMNS_TUPLE = ("src", "sport", "dst", "dport", "conn_uuid")


def tuple_q(conn: Connection) -> Q | None:
    """Socketless drops of the connection's packets, either direction; None: no 4-tuple known."""
    if None in (conn.src, conn.sport, conn.dst, conn.dport):
        return None
    out = Q(src=conn.src, sport=conn.sport, dst=conn.dst, dport=conn.dport)
    back = Q(src=conn.dst, sport=conn.dport, dst=conn.src, dport=conn.sport)
    return Q(conn_uuid__isnull=True) & (out | back)


def for_connection_q(conn: Connection) -> Q:
    """Drops of the connection: its socket's, or its packets' where they had no socket."""
    own = Q(conn_uuid=conn.conn_uuid)
    by_tuple = tuple_q(conn)
    if by_tuple is None:
        return own
    lived = Q(ts_wall__gte=conn.first_seen - SLACK_S)
    if conn.closed:
        lived &= Q(ts_wall__lte=conn.last_seen + SLACK_S)
    return own | (by_tuple & lived)


def of_connection(conn: Connection) -> QuerySet[Any]:
    return SkbDrop.objects.filter(host_id=conn.host_id).filter(for_connection_q(conn))


def drops(conn: Connection) -> list[dict[str, Any]]:
    """The connection page's rows, newest first: ``matched`` says how a row was found
    ("socket": it carried this connection; "addresses": a packet of its 4-tuple dropped
    where no socket held it, e.g. at a forwarding hop)."""
    rows = list(of_connection(conn).order_by("-ts_ns").values(*COLUMNS, *COLUMNS_TUPLE)[:MAX_ROWS])
    for row in rows:
        row["matched"] = "socket" if row.pop("conn_uuid") == conn.conn_uuid else "addresses"
    return rows


def link_socketless(rows: list[dict[str, Any]]) -> None:
    """Give each socketless drop row (no conn_uuid, a 4-tuple) the connection of its
    4-tuple on its host, either direction, that had begun by the drop (the newest such):
    one indexed look-up per distinct 4-tuple (Connection's port indexes)."""
    found: dict[tuple[Any, ...], str | None] = {}
    for row in rows:
        if row.get("conn_uuid") or None in (row["src"], row["sport"], row["dst"], row["dport"]):
            continue
        key = (row["host_id"], row["src"], row["sport"], row["dst"], row["dport"])
        if key not in found:
            host, src, sport, dst, dport = key
            either = Q(src=src, sport=sport, dst=dst, dport=dport) | Q(src=dst, sport=dport, dst=src, dport=sport)
            match = (
                Connection.objects.filter(either, host_id=host, first_seen__lte=row["ts_wall"] + SLACK_S)
                .order_by("-first_seen")
                .values_list("conn_uuid", flat=True)
                .first()
            )
            found[key] = match
        row["conn_uuid"] = found[key]
        row["matched"] = "addresses" if found[key] else None

"""A LISTEN row's accept queue as `ss -ltn` shows it (issue 34 item 6): connections waiting
for accept() (Recv-Q) and the backlog in force (Send-Q), from the newest ``sock_event``
the collector read for that listener through sock_diag (collector/listen_queues.py):
``listen-queue`` when its queue or backlog moved, ``listen-overflow`` when it was full as
its namespace's ListenOverflows moved. One look-up per LISTEN row of a page, a backward
range of sock_event's (conn_uuid, ts_ns) index.
Keep in sync with: js/connections.js and js/connection.js (the state cell), docs/dashboard.md.
"""

from __future__ import annotations

from typing import Any

from webapp.dashboard.tables import SockEvent

PROBES = ("listen-queue", "listen-overflow")
LISTEN = "LISTEN"


def queue_of(host: str, uuid: str) -> dict[str, Any] | None:
    """``{queue, backlog, at, full}`` of the listener's newest read, None if none was read."""
    row = (
        SockEvent.objects.filter(host_id=host, conn_uuid=uuid, probe__in=PROBES)
        .order_by("-ts_ns")
        .values("queue", "backlog", "ts_wall")
        .first()
    )
    if row is None or row["queue"] is None or row["backlog"] is None:
        return None
    return {
        "queue": row["queue"],
        "backlog": row["backlog"],
        "at": row["ts_wall"],
        "full": row["queue"] > row["backlog"],
    }


def queues(rows: list[Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(host_id, conn_uuid) -> the ``listen_queue`` of each open LISTEN row of ``rows``."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for c in rows:
        if c.state == LISTEN and not c.closed:
            got = queue_of(c.host_id, c.conn_uuid)
            if got is not None:
                out[(c.host_id, c.conn_uuid)] = got
    return out

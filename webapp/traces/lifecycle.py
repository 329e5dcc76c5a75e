"""Keeps the Connection table (one row per conn_uuid) up to date from new records.

Called inside the ingest transaction with the records that were actually stored
(duplicates excluded), so counters stay exact when the collector resends a batch.
Which kinds count for what is documented in docs/webapp.md ("Connections").
Keep in sync with: webapp/traces/models.py (Connection columns), translators/records.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import connection

from translators.records import Record
from webapp.traces.models import Connection
from webapp.traces.schema import KIND_BY_TYPE

TRACKED_KINDS = frozenset({"tcp_state", "tcp_retransmit", "tcp_reset", "connection", "siftr_sample", "alert"})
TCP_KINDS = frozenset({"tcp_state", "tcp_retransmit", "tcp_reset", "siftr_sample"})
LOOKUP_CHUNK = 500  # conn_uuids per IN (...) query: well under every backend's parameter limit
UPDATE_FIELDS = [
    f.name for f in Connection._meta.concrete_fields if f.name not in ("id", "conn_uuid", "host_id", "boot_id")
]


def apply(records: Iterable[Record]) -> int:
    """Fold tracked records into their connections; returns how many connections changed."""
    touched: dict[str, list[Record]] = {}
    for rec in records:
        if rec.conn_uuid is not None and KIND_BY_TYPE[type(rec)] in TRACKED_KINDS:
            touched.setdefault(rec.conn_uuid, []).append(rec)
    if not touched:
        return 0
    existing = _load(list(touched))
    new: list[Connection] = []
    for uuid, recs in touched.items():
        conn = existing.get(uuid)
        if conn is None:
            conn = _new_connection(recs[0])
            new.append(conn)
        for rec in recs:
            _fold(conn, rec)
    Connection.objects.bulk_create(new)
    _update(list(existing.values()))
    return len(touched)


def _update(conns: list[Connection]) -> None:
    """One executemany UPDATE by primary key: Django's bulk_update builds a CASE per
    field and row, which cost 40x the rest of ingest for a thousand connections."""
    if not conns:
        return
    quote = connection.ops.quote_name
    columns = [Connection._meta.get_field(name).column for name in UPDATE_FIELDS]
    sql = (
        f"UPDATE {quote(Connection._meta.db_table)} SET {', '.join(f'{quote(c)} = %s' for c in columns)} "
        f"WHERE {quote('id')} = %s"
    )
    with connection.cursor() as cursor:
        cursor.executemany(sql, [(*(getattr(c, name) for name in UPDATE_FIELDS), c.pk) for c in conns])


def _load(uuids: list[str]) -> dict[str, Connection]:
    found: dict[str, Connection] = {}
    for start in range(0, len(uuids), LOOKUP_CHUNK):
        for conn in Connection.objects.filter(conn_uuid__in=uuids[start : start + LOOKUP_CHUNK]):
            found[conn.conn_uuid] = conn
    return found


def _new_connection(rec: Record) -> Connection:
    return Connection(
        host_id=rec.host_id,
        boot_id=rec.boot_id,
        conn_uuid=rec.conn_uuid,
        first_seen=rec.ts_wall,
        last_seen=rec.ts_wall,
        proto=getattr(rec, "proto", None) or "tcp",
    )


def _fold(conn: Connection, rec: Record) -> None:
    conn.first_seen = min(conn.first_seen, rec.ts_wall)
    conn.last_seen = max(conn.last_seen, rec.ts_wall)
    _fill_flow(conn, rec)
    _fill_owner(conn, rec)
    _FOLDERS[KIND_BY_TYPE[type(rec)]](conn, rec)


# A connecting socket's first state change (CLOSED -> SYN_SENT) fires before the kernel
# picks the source port and address: zeros there mean "not known yet".
_UNKNOWN = (None, 0, "0.0.0.0", "::")


def _fill_flow(conn: Connection, rec: Record) -> None:
    if conn.sport not in _UNKNOWN and conn.src not in _UNKNOWN and conn.dport not in _UNKNOWN:
        return  # the common case: the 4-tuple is known since the first records
    for name in ("ip_ver", "src", "sport", "dst", "dport"):
        value = getattr(rec, name, None)
        if getattr(conn, name) in _UNKNOWN and value not in _UNKNOWN:
            setattr(conn, name, value)


def _fill_owner(conn: Connection, rec: Record) -> None:
    # Softirq context has no meaningful current task: such attribution only fills gaps,
    # while task-context attribution (ctx == "task") replaces it.
    if rec.comm is None and rec.pid is None:
        return
    if rec.ctx == "task" or (conn.comm is None and conn.pid is None):
        conn.pid, conn.tgid, conn.comm, conn.uid = rec.pid, rec.tgid, rec.comm, rec.uid


def _set_state(conn: Connection, state: str | None, ts_ns: int) -> None:
    if state is None or (conn.state_ts_ns is not None and ts_ns < conn.state_ts_ns):
        return  # an older record arriving late does not roll the state back
    conn.state, conn.state_ts_ns = state, ts_ns
    conn.closed = state == "CLOSED"


def _fold_state(conn: Connection, rec: Any) -> None:
    _set_state(conn, rec.state, rec.ts_ns)


def _fold_retransmit(conn: Connection, rec: Any) -> None:
    conn.retransmits += 1


def _fold_reset(conn: Connection, rec: Any) -> None:
    conn.resets += 1
    conn.anomaly = True


def _fold_alert(conn: Connection, rec: Any) -> None:
    conn.alerts += 1
    conn.anomaly = True


def _fold_sample(conn: Connection, rec: Any) -> None:
    conn.srtt_us = rec.srtt if rec.srtt is not None else conn.srtt_us
    conn.snd_cwnd = rec.snd_cwnd if rec.snd_cwnd is not None else conn.snd_cwnd


def _fold_summary(conn: Connection, rec: Any) -> None:
    conn.proto = rec.proto
    if rec.start is not None:
        conn.first_seen = min(conn.first_seen, rec.start)
    if rec.end is not None:
        conn.last_seen = max(conn.last_seen, rec.end)
    for name in ("bytes_orig", "bytes_resp", "bytes_acked", "bytes_received"):
        if getattr(rec, name) is not None:
            setattr(conn, name, getattr(rec, name))
    # The summary's kernel counter covers retransmissions the events may have missed.
    conn.retransmits = max(conn.retransmits, rec.total_retrans or 0)
    _set_state(conn, rec.state, rec.ts_ns)
    if rec.source == "kernel":
        conn.closed = True  # live summaries are emitted when the socket is destroyed


_FOLDERS: dict[str, Any] = {
    "tcp_state": _fold_state,
    "tcp_retransmit": _fold_retransmit,
    "tcp_reset": _fold_reset,
    "alert": _fold_alert,
    "siftr_sample": _fold_sample,
    "connection": _fold_summary,
}

"""Keeps the Connection table (one row per host and conn_uuid) up to date from new records.

A connection belongs to exactly one host: rows are found and folded by (host_id,
conn_uuid), so a record of host B never changes host A's row, whatever its conn_uuid
(ingest also refuses conn_uuids not derived from the token's host: webapp/traces/owner.py).

Called inside the ingest transaction with the records that were actually stored
(duplicates excluded), so counters stay exact when the collector resends a batch.
Which kinds count for what is documented in docs/webapp.md ("Connections").
Keep in sync with: webapp/traces/models.py (Connection columns), translators/records.py.
"""

from __future__ import annotations

import itertools
import operator
from collections import Counter
from collections.abc import Iterable
from typing import Any

import msgspec
from django.db import connection
from django.db.models import Count

from translators.records import BY_KIND, Record
from webapp.traces.models import KIND_MODELS, Connection

LOOKUP_CHUNK = 500  # conn_uuids per IN (...) query: well under every backend's parameter limit
KEY_FIELDS = ("host_id", "boot_id", "conn_uuid")
UPDATE_FIELDS = tuple(f.name for f in Connection._meta.concrete_fields if f.name not in ("id", *KEY_FIELDS))
# Column defaults of a new row (models.Connection): the fields a record may never set.
DEFAULTS = {f.name: f.get_default() for f in Connection._meta.concrete_fields if f.name in UPDATE_FIELDS}

# A Connection row being folded: a msgspec Struct built from the row tuple in one C
# call. Django's Model.__init__ (and bulk_create) cost more than the folding itself.
_Conn: Any = msgspec.defstruct(
    "_Conn",
    [
        ("pk", Any),
        *((name, Any) for name in KEY_FIELDS),
        *((name, Any, DEFAULTS[name]) for name in UPDATE_FIELDS),
        ("loaded", Any, ()),  # the stored values, to write back only what changed
    ],
)
_values = operator.attrgetter(*UPDATE_FIELDS)
_POSITIONS = range(len(UPDATE_FIELDS))


def apply(records: Iterable[Record]) -> int:
    """Fold tracked records into their connections; returns how many connections changed."""
    touched: dict[tuple[str, str], list[tuple[Any, Record]]] = {}
    folders = _FOLDERS_BY_TYPE
    alerts: list[tuple[tuple[str, str], Record]] = []
    for rec in records:
        uuid = rec.conn_uuid
        if uuid is not None:
            folder = folders.get(type(rec))
            if folder is _fold_alert:
                alerts.append(((rec.host_id, uuid), rec))
            elif folder is not None:
                touched.setdefault((rec.host_id, uuid), []).append((folder, rec))
    for key, rec in _first_versions(alerts):
        touched.setdefault(key, []).append((_fold_alert, rec))
    if not touched:
        return 0
    existing = _load(list(touched))
    new: list[Any] = []
    for key, recs in touched.items():
        conn = existing.get(key)
        if conn is None:
            conn = _new_connection(recs[0][1])
            new.append(conn)
        for folder, rec in recs:
            ts = rec.ts_wall
            if ts < conn.first_seen:
                conn.first_seen = ts
            if ts > conn.last_seen:
                conn.last_seen = ts
            if conn.sport in _UNKNOWN or conn.src in _UNKNOWN or conn.dport in _UNKNOWN:
                _fill_flow(conn, rec)
            if rec.comm is not None or rec.pid is not None:
                _fill_owner(conn, rec)
            folder(conn, rec)
    _insert(new)
    _update(existing.values())
    return len(touched)


def _first_versions(alerts: list[tuple[tuple[str, str], Record]]) -> list[tuple[tuple[str, str], Record]]:
    """The alerts seen for the first time: an alert is emitted again (same alert_id) as it
    escalates, fires again or closes, and a connection counts it once. The batch's rows
    are already stored, so more stored rows than the batch holds mean an earlier version."""
    if not alerts:
        return []
    # Keyed by host too: another host's alert with the same id is not an earlier version.
    in_batch = Counter((rec.host_id, rec.alert_id) for _, rec in alerts)  # type: ignore[attr-defined]
    ids = sorted({aid for _, aid in in_batch if aid is not None})
    stored: dict[tuple[str, str], int] = {}
    for start in range(0, len(ids), LOOKUP_CHUNK):
        rows = (
            KIND_MODELS["alert"].objects.filter(alert_id__in=ids[start : start + LOOKUP_CHUNK])
            .values_list("host_id", "alert_id").annotate(n=Count("id"))
        )  # fmt: skip
        stored.update({(host, aid): n for host, aid, n in rows})
    out: list[tuple[tuple[str, str], Record]] = []
    seen: set[tuple[str, str]] = set()
    for key, rec in alerts:
        aid = (rec.host_id, rec.alert_id)  # type: ignore[attr-defined]
        if aid[1] is not None:
            if aid in seen or stored.get(aid, 0) > in_batch[aid]:
                continue
            seen.add(aid)
        out.append((key, rec))
    return out


def _columns(names: Iterable[str]) -> list[str]:
    quote = connection.ops.quote_name
    return [quote(Connection._meta.get_field(name).column) for name in names]


def _insert(conns: list[Any]) -> None:
    if not conns:
        return
    names = [*KEY_FIELDS, *UPDATE_FIELDS]
    sql = (
        f"INSERT INTO {connection.ops.quote_name(Connection._meta.db_table)} ({', '.join(_columns(names))}) "
        f"VALUES ({', '.join('%s' for _ in names)})"
    )
    with connection.cursor() as cursor:
        cursor.executemany(sql, [(c.host_id, c.boot_id, c.conn_uuid, *_values(c)) for c in conns])


def _update(conns: Iterable[Any]) -> None:
    """UPDATE by primary key only the columns that changed, one executemany per set of
    changed columns: a column in SET makes SQLite rewrite every index holding it, even
    for an unchanged value, and Connection has many indexes (the process and address
    filters) whose columns rarely change. (Django's bulk_update builds a CASE per
    field and row: 40x the rest of ingest for a thousand connections.)"""
    by_change: dict[tuple[int, ...], list[tuple[Any, ...]]] = {}
    for conn in conns:
        after = _values(conn)
        changed = tuple(itertools.compress(_POSITIONS, map(operator.ne, conn.loaded, after)))
        if changed:
            by_change.setdefault(changed, []).append((*(after[i] for i in changed), conn.pk))
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        for changed, rows in by_change.items():
            columns = _columns(UPDATE_FIELDS[i] for i in changed)
            sql = (
                f"UPDATE {quote(Connection._meta.db_table)} SET {', '.join(f'{c} = %s' for c in columns)} "
                f"WHERE {quote('id')} = %s"
            )
            cursor.executemany(sql, rows)


def _load(keys: list[tuple[str, str]]) -> dict[tuple[str, str], Any]:
    """The stored rows of these (host_id, conn_uuid) keys (by the conn_uuid index, then host)."""
    wanted = set(keys)
    uuids = sorted({uuid for _, uuid in keys})
    quote = connection.ops.quote_name
    names = ["id", *KEY_FIELDS, *UPDATE_FIELDS]
    select = (
        f"SELECT {', '.join(_columns(names))} FROM {quote(Connection._meta.db_table)} WHERE {quote('conn_uuid')} IN "
    )
    found: dict[tuple[str, str], Any] = {}
    first = len(KEY_FIELDS) + 1
    with connection.cursor() as cursor:
        for start in range(0, len(uuids), LOOKUP_CHUNK):
            chunk = uuids[start : start + LOOKUP_CHUNK]
            cursor.execute(select + f"({', '.join('%s' for _ in chunk)})", chunk)
            for row in cursor.fetchall():
                conn = _Conn(*row, row[first:])
                key = (conn.host_id, conn.conn_uuid)
                if key in wanted:
                    found[key] = conn
    return found


def _new_connection(rec: Record) -> Any:
    values: dict[str, Any] = dict(
        host_id=rec.host_id,
        boot_id=rec.boot_id,
        conn_uuid=rec.conn_uuid,
        first_seen=rec.ts_wall,
        last_seen=rec.ts_wall,
        proto=getattr(rec, "proto", None) or "tcp",
    )
    return _Conn(None, **values)


# A connecting socket's first state change (CLOSED -> SYN_SENT) fires before the kernel
# picks the source port and address: zeros there mean "not known yet".
_UNKNOWN = (None, 0, "0.0.0.0", "::")


def _fill_flow(conn: Any, rec: Record) -> None:
    # Only called while part of the 4-tuple is unknown (rare: the first records).
    for name in ("ip_ver", "src", "sport", "dst", "dport"):
        value = getattr(rec, name, None)
        if getattr(conn, name) in _UNKNOWN and value not in _UNKNOWN:
            setattr(conn, name, value)


def _fill_owner(conn: Any, rec: Record) -> None:
    # Softirq context has no meaningful current task: such attribution only fills gaps,
    # while task-context attribution (ctx == "task") replaces it.
    if rec.ctx == "task" or (conn.comm is None and conn.pid is None):
        conn.pid, conn.tgid, conn.comm, conn.uid = rec.pid, rec.tgid, rec.comm, rec.uid


def _set_state(conn: Any, state: str | None, ts_ns: int) -> None:
    if state is None or (conn.state_ts_ns is not None and ts_ns < conn.state_ts_ns):
        return  # an older record arriving late does not roll the state back
    conn.state, conn.state_ts_ns = state, ts_ns
    conn.closed = state == "CLOSED"


def _fold_state(conn: Any, rec: Any) -> None:
    _set_state(conn, rec.state, rec.ts_ns)
    if rec.active is not None and conn.active is None:
        if rec.active is False and (conn.bytes_orig is not None or conn.bytes_resp is not None):
            # Counters folded while the direction was unknown counted the local side as
            # the originator: this host turns out to be the responder.
            conn.bytes_orig, conn.bytes_resp = conn.bytes_resp, conn.bytes_orig
        conn.active = rec.active


def _fold_counters(conn: Any, rec: Any) -> None:
    # flow_counters are the kernel's running totals for the local socket (out = sent by
    # this host): the largest seen wins, so a late older report never lowers them.
    # This host is the originator unless a tcp_state record said it accepted.
    orig, resp = (rec.bytes_in, rec.bytes_out) if conn.active is False else (rec.bytes_out, rec.bytes_in)
    conn.bytes_orig = orig if conn.bytes_orig is None else max(conn.bytes_orig, orig)
    conn.bytes_resp = resp if conn.bytes_resp is None else max(conn.bytes_resp, resp)
    _local(conn, rec.bytes_out, rec.bytes_in, rec.packets_out, rec.packets_in)


def _local(
    conn: Any, bytes_out: int | None, bytes_in: int | None, packets_out: int | None, packets_in: int | None
) -> None:
    """The local socket's totals: the largest report wins (they only grow), never swapped."""
    for name, value in (
        ("bytes_out", bytes_out),
        ("bytes_in", bytes_in),
        ("packets_out", packets_out),
        ("packets_in", packets_in),
    ):
        if value is not None:
            current = getattr(conn, name)
            setattr(conn, name, value if current is None else max(current, value))


def _fold_retransmit(conn: Any, rec: Any) -> None:
    conn.retransmits += 1


def _fold_reset(conn: Any, rec: Any) -> None:
    conn.resets += 1
    conn.anomaly = True


def _fold_alert(conn: Any, rec: Any) -> None:
    conn.alerts += 1
    conn.anomaly = True


def _fold_sample(conn: Any, rec: Any) -> None:
    conn.srtt_us = rec.srtt if rec.srtt is not None else conn.srtt_us
    conn.snd_cwnd = rec.snd_cwnd if rec.snd_cwnd is not None else conn.snd_cwnd


def _fold_summary(conn: Any, rec: Any) -> None:
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
        # The local totals come from flow_counters only (the tcp provider reports them at
        # destroy too): the summary's segs count every segment, flow_counters' packets do
        # not, and one column must not mix the two.
    else:  # a capture: no local socket, the originator's view
        _local(conn, rec.bytes_orig, rec.bytes_resp, rec.packets_orig, rec.packets_resp)


_FOLDERS: dict[str, Any] = {
    "tcp_state": _fold_state,
    "tcp_retransmit": _fold_retransmit,
    "tcp_reset": _fold_reset,
    "alert": _fold_alert,
    "siftr_sample": _fold_sample,
    "connection": _fold_summary,
    "flow_counters": _fold_counters,
}
# Record type -> its folder: one dict lookup per record picks tracked kinds and their fold.
_FOLDERS_BY_TYPE: dict[type[Record], Any] = {BY_KIND[kind]: folder for kind, folder in _FOLDERS.items()}
TRACKED_KINDS = frozenset(_FOLDERS)  # the kinds that update connections

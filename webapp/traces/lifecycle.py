"""Keeps the Connection table (one row per host and conn_uuid) up to date from new records.

A connection belongs to exactly one host: rows are found and folded by (host_id,
conn_uuid), so a record of host B never changes host A's row, whatever its conn_uuid
(ingest also refuses conn_uuids not derived from the token's host: webapp/traces/owner.py).

Called inside the ingest transaction with the records that were actually stored
(duplicates excluded), so counters stay exact when the collector resends a batch.
On PostgreSQL the rows are read without a lock (by the scale-out writer on a second
session, while its own is busy with the batch's COPY: store.store_new_batch), or taken
as this thread last committed them (REMEMBERED_ROWS), then written back only where
they are still the version read (xmin); a row another transaction changed or deleted
since, changed by the batch or not, is read again, locked, and folded again from the
same records, so a concurrent update is never overwritten.
Which kinds count for what is documented in docs/webapp.md ("Connections").
Keep in sync with: webapp/traces/models.py (Connection columns), translators/records.py.
"""

from __future__ import annotations

import functools
import itertools
import operator
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from django.db import connection, models, transaction
from django.db.models import Count

from translators.records import BY_KIND, Record
from webapp.traces import folded, pgbulk, view
from webapp.traces.models import KIND_MODELS, Connection

LOOKUP_CHUNK = 500  # conn_uuids per IN (...) query: well under every backend's parameter limit
KEY_FIELDS = ("host_id", "boot_id", "conn_uuid")
UPDATE_FIELDS = tuple(f.name for f in Connection._meta.concrete_fields if f.name not in ("id", *KEY_FIELDS))
# Column defaults of a new row (models.Connection): the fields a record may never set.
DEFAULTS = {f.name: f.get_default() for f in Connection._meta.concrete_fields if f.name in UPDATE_FIELDS}

_FLOATS = {f.name for f in Connection._meta.concrete_fields if isinstance(f, models.FloatField)}
# A Connection row being folded: a msgspec Struct built from the row tuple in one C
# call. Django's Model.__init__ (and bulk_create) cost more than the folding itself.
_Conn: Any = msgspec.defstruct(
    "_Conn",
    [
        ("id", Any),
        *((name, Any) for name in KEY_FIELDS),
        # Typed floats: PostgreSQL's JSON (pgbulk.load) writes a whole float without ".0".
        *((name, float if name in _FLOATS else Any, DEFAULTS[name]) for name in UPDATE_FIELDS),
        ("loaded", Any, ()),  # the stored values, to write back only what changed
        (pgbulk.VERSION, Any, None),  # PostgreSQL: the row's version read (xmin), None for a new row
    ],
)
_values = operator.attrgetter(*UPDATE_FIELDS)
_POSITIONS = range(len(UPDATE_FIELDS))
# PostgreSQL: the Connection rows this thread last wrote, as committed, with their
# versions: (host_id, conn_uuid) -> (id, boot_id, values, version), the least recently
# written dropped first. A batch folds into them without reading the table again; a
# row another transaction changed or deleted since is not the version remembered, so
# it is read again and folded again as any row changed since its read (Fold.finish).
REMEMBERED_ROWS = 20_000
_memory = threading.local()


def apply(records: Iterable[Record]) -> int:
    """Fold tracked records into their connections; returns how many connections changed."""
    batch = prepare(records)
    batch.fold()
    return batch.finish()


@dataclass
class Fold:
    """One batch's fold in steps, so that a writer can fold while PostgreSQL takes the
    batch's COPY (store.store_new_batch): prepare() (the records by connection, and
    their rows read unless load=False), load() (the rows, on a side connection if
    given), fold() (Python only), finish() (once the records are stored: alerts, then
    the write)."""

    touched: dict[tuple[str, str], list[tuple[Any, Record]]]
    alerts: list[tuple[tuple[str, str], Record]]
    conns: dict[tuple[str, str], Any] = field(default_factory=dict)  # every connection folded
    existing: dict[tuple[str, str], Any] = field(default_factory=dict)  # loaded, not new
    new: list[Any] = field(default_factory=list)
    loaded: bool = False
    alerts_by_key: dict[tuple[str, str], list[tuple[Any, Record]]] = field(default_factory=dict)  # first versions

    def load(self, side: Any = None) -> None:
        """Read the stored rows of the connections the batch touches (on `side`, a
        pgbulk.side_connection(), instead of Django's connection when given)."""
        if self.touched:
            self.existing = _load(list(self.touched), side=side)
        self.loaded = True

    def fold(self) -> None:
        """Fold the records of the tracked kinds but alerts into their (loaded or new) rows."""
        assert self.loaded
        self._fold(self.touched)

    def finish(self) -> int:
        """Fold the alerts seen for the first time (the batch must be stored) and write the rows."""
        by_key = self.alerts_by_key
        for key, rec in _first_versions(self.alerts):
            by_key.setdefault(key, []).append((_fold_alert, rec))
        unloaded = [key for key in by_key if key not in self.conns]
        if unloaded:
            self.existing.update(_load(unloaded))
        self._fold(by_key)
        if not self.conns:
            return 0
        if connection.vendor == "postgresql":
            # Two statements for the batch: the new rows, the changed ones (pgbulk.py).
            _insert_versioned(self.new)
            raced = self._update_unchanged_since_read(self.existing)
            if raced:
                self._fold_again(raced)
            written = [(key, (c.id, c.boot_id, _values(c), c.xmin)) for key, c in self.conns.items()]
            transaction.on_commit(functools.partial(_remember, written))
        else:
            _insert(self.new)
            _update(self.existing.values())
        return len(self.conns)

    def _update_unchanged_since_read(self, conns: dict[tuple[str, str], Any]) -> list[tuple[str, str]]:
        """PostgreSQL: write the changed rows that are still the version read; the keys of the
        rows that are not (changed or deleted by another transaction since), whether this
        batch changed them or not: its records may change the newer version where they
        left the one read as it was."""
        changed, rows = _changes(conns.values(), versioned=True)
        updated = pgbulk.update_by_id(Connection, [UPDATE_FIELDS[i] for i in changed], rows, versioned=True)
        assert updated is not None
        same = [(conn.id, conn.xmin) for conn in conns.values() if conn.loaded == _values(conn)]
        stale = pgbulk.changed_since(Connection, same)  # one statement, only when there are such rows
        raced = []
        for key, conn in conns.items():
            if conn.id in updated:
                conn.xmin = updated[conn.id]
            elif conn.id in stale or conn.loaded != _values(conn):
                raced.append(key)
        return raced

    def _fold_again(self, raced: list[tuple[str, str]]) -> None:
        """Rows another transaction changed (or deleted) since they were read: read them
        again, locked until this transaction ends, fold the same records into them, write."""
        fresh = _load(raced, lock=True)
        again: dict[tuple[str, str], Any] = {}
        new = []
        for key in raced:
            del self.existing[key]
            conn: Any = fresh.get(key)
            for recs in (self.touched.get(key), self.alerts_by_key.get(key)):
                if not recs:
                    continue
                if conn is None:  # deleted meanwhile (retention): a new row again
                    conn = _new_connection(recs[0][1])
                    new.append(conn)
                _fold_into(conn, recs)
            self.conns[key] = conn
            if conn.id is not None:
                again[key] = conn
        self.existing.update(again)
        self.new.extend(new)
        _insert_versioned(new)
        left = self._update_unchanged_since_read(again)
        assert not left, f"rows locked FOR UPDATE changed: {left}"

    def _fold(self, touched: dict[tuple[str, str], list[tuple[Any, Record]]]) -> None:
        for key, recs in touched.items():
            conn = self.conns.get(key)
            if conn is None:
                conn = self.existing.get(key)
                if conn is None:
                    conn = _new_connection(recs[0][1])
                    self.new.append(conn)
                self.conns[key] = conn
            _fold_into(conn, recs)


def prepare(records: Iterable[Record], load: bool = True) -> Fold:
    """The batch's tracked records by connection, and the stored rows of those connections
    (load=False: not yet, Fold.load() reads them)."""
    touched: dict[tuple[str, str], list[tuple[Any, Record]]] = {}
    folders = _FOLDERS_BY_TYPE
    alerts: list[tuple[tuple[str, str], Record]] = []
    records = records if isinstance(records, list) else list(records)
    # Only the tracked kinds (picked in C: compress, map), and the kind first: the writer's
    # views of untracked kinds have no conn_uuid (view.py).
    for rec in itertools.compress(records, map(folders.__contains__, map(type, records))):
        uuid = rec.conn_uuid
        if uuid is None:
            continue
        folder = folders[type(rec)]
        if folder is _fold_alert:
            alerts.append(((rec.host_id, uuid), rec))
        elif folder is folded.parts:  # tcp --tcp-fold: folded as the records it stands for
            parts = [(_FOLDERS[p.kind], p) for p in folded.parts(rec) if p.kind in _FOLDERS]
            touched.setdefault((rec.host_id, uuid), []).extend(parts)
        else:
            touched.setdefault((rec.host_id, uuid), []).append((folder, rec))
    batch = Fold(touched, alerts)
    if load:
        batch.load()
    return batch


def _fold_into(conn: Any, recs: list[tuple[Any, Record]]) -> None:
    # Only _fill_flow changes the 4-tuple: known once, it stays known (the common case).
    unknown = conn.sport in _UNKNOWN or conn.src in _UNKNOWN or conn.dport in _UNKNOWN
    for folder, rec in recs:
        ts = rec.ts_wall
        if ts < conn.first_seen:
            conn.first_seen = ts
        if ts > conn.last_seen:
            conn.last_seen = ts
        if unknown:
            _fill_flow(conn, rec)
            unknown = conn.sport in _UNKNOWN or conn.src in _UNKNOWN or conn.dport in _UNKNOWN
        if rec.comm is not None or rec.pid is not None:
            # Softirq context has no meaningful current task: such attribution only
            # fills gaps, while task-context attribution (ctx == "task") replaces it.
            if rec.ctx == "task" or (conn.comm is None and conn.pid is None):
                conn.pid, conn.tgid, conn.comm, conn.uid = rec.pid, rec.tgid, rec.comm, rec.uid
        folder(conn, rec)


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


def _insert_versioned(conns: list[Any]) -> None:
    """PostgreSQL: insert new rows (pgbulk.insert), giving each its id and version."""
    by_key = {(conn.host_id, conn.conn_uuid): conn for conn in conns}
    for host, uuid, pk, version in pgbulk.insert(
        Connection, [*KEY_FIELDS, *UPDATE_FIELDS], conns, key=("host_id", "conn_uuid")
    ):
        conn = by_key[(host, uuid)]
        conn.id, conn.xmin = pk, version


def _remember(written: list[tuple[tuple[str, str], tuple[Any, ...]]]) -> None:
    """After the commit: the rows as this thread wrote them (REMEMBERED_ROWS)."""
    memory = _remembered()
    for key, row in written:
        memory.pop(key, None)  # to the end: the most recently written
        memory[key] = row
    while len(memory) > REMEMBERED_ROWS:
        del memory[next(iter(memory))]


def _remembered() -> dict[tuple[str, str], tuple[Any, ...]]:
    memory: dict[tuple[str, str], tuple[Any, ...]] | None = getattr(_memory, "rows", None)
    if memory is None:
        memory = _memory.rows = {}
    return memory


def forget_rows() -> None:
    """Drop this thread's remembered rows (tests; harmless anywhere: they are read again)."""
    _memory.rows = {}


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


def _changes(conns: Iterable[Any], versioned: bool = False) -> tuple[list[int], list[tuple[Any, ...]]]:
    """The positions (in UPDATE_FIELDS) any loaded row changed, and the changed rows'
    values at those positions, then their id (then the version read, if `versioned`)."""
    union: set[int] = set()
    changed = []
    for conn in conns:
        after = _values(conn)
        if conn.loaded != after:
            union.update(itertools.compress(_POSITIONS, map(operator.ne, conn.loaded, after)))
            changed.append((after, conn))
    positions = sorted(union)
    if versioned:
        return positions, [(*(after[i] for i in positions), conn.id, conn.xmin) for after, conn in changed]
    return positions, [(*(after[i] for i in positions), conn.id) for after, conn in changed]


def _update(conns: Iterable[Any]) -> None:
    """SQLite: UPDATE by primary key only the columns that changed, one executemany per set of
    changed columns: a column in SET makes SQLite rewrite every index holding it, even
    for an unchanged value, and Connection has many indexes (the process and address
    filters) whose columns rarely change. (Django's bulk_update builds a CASE per
    field and row: 40x the rest of ingest for a thousand connections.)"""
    by_change: dict[tuple[int, ...], list[tuple[Any, ...]]] = {}
    for conn in conns:
        after = _values(conn)
        changed = tuple(itertools.compress(_POSITIONS, map(operator.ne, conn.loaded, after)))
        if changed:
            by_change.setdefault(changed, []).append((*(after[i] for i in changed), conn.id))
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        for changed, rows in by_change.items():
            columns = _columns(UPDATE_FIELDS[i] for i in changed)
            sql = (
                f"UPDATE {quote(Connection._meta.db_table)} SET {', '.join(f'{c} = %s' for c in columns)} "
                f"WHERE {quote('id')} = %s"
            )
            cursor.executemany(sql, rows)


def _load(keys: list[tuple[str, str]], side: Any = None, lock: bool = False) -> dict[tuple[str, str], Any]:
    """The stored rows of these (host_id, conn_uuid) keys (by the conn_uuid index, then host).

    PostgreSQL: with their versions, the rows this thread wrote last taken as it
    remembers them (REMEMBERED_ROWS) unless `lock`; side: read the others on that
    connection (pgbulk.side_connection()); lock: FOR UPDATE, until the transaction ends."""
    found: dict[tuple[str, str], Any] = {}
    if connection.vendor == "postgresql" and not lock:
        memory = _remembered()
        for key in keys:
            row = memory.get(key)
            if row is not None:
                pk, boot, values, version = row
                found[key] = _Conn(pk, key[0], boot, key[1], *values, values, version)
        if found:
            keys = [key for key in keys if key not in found]
            if not keys:
                return found
    wanted = set(keys)
    uuids = sorted({uuid for _, uuid in keys})
    names = ["id", *KEY_FIELDS, *UPDATE_FIELDS]
    if connection.vendor == "postgresql":
        rows = pgbulk.load(Connection, names, "conn_uuid", uuids, _Conn, version=True, lock=lock, side=side)
        for conn in rows:
            key = (conn.host_id, conn.conn_uuid)
            if key in wanted:
                conn.loaded = _values(conn)
                found[key] = conn
        return found
    quote = connection.ops.quote_name
    select = (
        f"SELECT {', '.join(_columns(names))} FROM {quote(Connection._meta.db_table)} WHERE {quote('conn_uuid')} IN "
    )
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
    # A capture's summary knows its whole tuple: a port 0 there is real (an ICMP echo
    # reply's type, the ports of a transport without any: analysis/flows/ip_flows.py).
    whole = rec.kind == "connection" and getattr(rec, "source", None) == "wire"
    for name in ("ip_ver", "src", "sport", "dst", "dport"):
        value = getattr(rec, name, None)
        if getattr(conn, name) in _UNKNOWN and (value not in _UNKNOWN or whole and value == 0):
            setattr(conn, name, value)


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
    if rec.conn_state is not None or rec.history is not None:  # Zeek's words, live or captured
        conn.conn_state, conn.history = rec.conn_state, rec.history
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
    "tcp_lifecycle": folded.parts,  # expanded in prepare()
}
# Record type -> its folder: one dict lookup per record picks tracked kinds and their fold.
# The writer's views of the same kinds (view.py) fold alike.
_FOLDERS_BY_TYPE: dict[type[Record], Any] = {BY_KIND[kind]: folder for kind, folder in _FOLDERS.items()}
_FOLDERS_BY_TYPE.update({view.view_of(kind): folder for kind, folder in _FOLDERS.items()})
TRACKED_KINDS = frozenset(_FOLDERS)  # the kinds that update connections

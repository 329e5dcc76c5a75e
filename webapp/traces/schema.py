"""Django model fields and indexes derived from the record schema.

The record tables are generated from ``translators.records.describe()``: one column
per record field, same name, a column type chosen from the field's Python type.
Nothing here lists record fields by hand, so a field added to ``records.py`` needs
only ``manage.py makemigrations traces`` (tests/test_traces_schema.py fails until then).
Keep in sync with: translators/records.py (FieldDesc), webapp/traces/store.py (the
row builder uses the same column order and JSON rule).
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec
from django.db import models

from translators.records import RECORD_TYPES, FieldDesc, Record, describe

# Kinds whose rows are one buffer's lifecycle: queried by skb_uid.
SKB_KINDS = frozenset({"skb_event", "skb_drop"})
# Kinds that never name a connection (conn_uuid always NULL): no connection index.
CONNECTIONLESS_KINDS = frozenset(
    {"drop_count", "loss_report", "sampling_report", "collector_status", "collector_stats"}
)
# index=True fields the record tables do not index themselves: the dashboard finds
# connections by address, port and process in the Connection table (one row per
# connection, indexed there), then reads a connection's records by conn_uuid.
# host_id, conn_uuid and skb_uid get the composite indexes of record_indexes().
SERVED_ELSEWHERE = frozenset({"src", "sport", "dst", "dport", "comm", "host_id", "conn_uuid", "skb_uid"})
# Except where a record's own 4-tuple is what is looked up (issue 34 item 5): a drop
# with no socket (a forwarded packet) is put on its connection by ports and addresses,
# either direction (webapp/dashboard/conn_drops.py); the UDP page filters datagrams by
# address or port, either end (`sport = P OR dport = P`: one index per column, each
# arm an index range, PostgreSQL's BitmapOr and SQLite's OR optimization).
FIRST_STAGES = ("tx-first", "rx-first")  # skb_event: a buffer's first sighting (translators/skb.py)
TUPLE_INDEXES: dict[str, tuple[tuple[str, ...], ...]] = {
    "skb_drop": (("sport", "dport", "ts_wall"),),
    "udp_datagram": (("sport", "ts_wall"), ("dport", "ts_wall"), ("src", "ts_wall"), ("dst", "ts_wall")),
}


def kind_of(cls: type[Record]) -> str:
    return str(cls.__struct_config__.tag)


# type(record) -> kind, for the per-record loops of ingest: a dict lookup instead of
# the Record.kind property (a measurable share of ingest time at ~50,000 records/s).
KIND_BY_TYPE: dict[type[Record], str] = {cls: kind_of(cls) for cls in RECORD_TYPES}


def is_json(desc: FieldDesc) -> bool:
    """Lists, dicts and nested structs are stored as JSON documents."""
    tp = desc.type
    return tp in (list, dict) or (isinstance(tp, type) and issubclass(tp, msgspec.Struct))


def model_field(desc: FieldDesc) -> models.Field[Any, Any]:
    if is_json(desc):
        return models.JSONField(null=desc.nullable)
    if desc.type is bool:
        return models.BooleanField(null=desc.nullable)
    if desc.type is int:
        return models.BigIntegerField(null=desc.nullable)
    if desc.type is float:
        return models.FloatField(null=desc.nullable)
    if desc.type is str:
        return models.TextField(null=desc.nullable)
    if desc.type is bytes:  # captured frames (frame_bytes), kept for pcap export
        return models.BinaryField(null=desc.nullable)
    raise TypeError(f"no column type for {desc.name}: {desc.type!r}")


def index_name(kind: str, *fields: str) -> str:
    """Index names are global in PostgreSQL and at most 30 characters in Django."""
    digest = hashlib.sha1(f"{kind}:{','.join(fields)}".encode()).hexdigest()[:6]
    return f"nt_{kind[:10]}_{fields[0][:8]}_{digest}"


def record_indexes(cls: type[Record]) -> list[models.Index]:
    kind = kind_of(cls)
    # The dashboard's timelines: records of host H between t0 and t1, newest first.
    indexes = [models.Index(fields=["host_id", "ts_wall"], name=index_name(kind, "host_id", "ts_wall"))]
    if kind not in CONNECTIONLESS_KINDS:
        # A connection's lifecycle page: all records with conn_uuid U in kernel-time order.
        indexes.append(models.Index(fields=["conn_uuid", "ts_ns"], name=index_name(kind, "conn_uuid", "ts_ns")))
    if kind in SKB_KINDS:
        # One buffer's life: every stage (and its drop) of skb_uid X in time order.
        indexes.append(models.Index(fields=["skb_uid", "ts_ns"], name=index_name(kind, "skb_uid", "ts_ns")))
    if kind == "alert":
        # The alerts list, newest first: `ORDER BY start DESC, id DESC LIMIT 500` (and the
        # Overview's top 10) walk this instead of sorting every alert row.
        indexes.append(models.Index(fields=["start", "id"], name=index_name(kind, "start", "id")))
        # Newest version only (dashboard/alert_versions.latest): `NOT EXISTS (... WHERE host_id =
        # H AND alert_id = A AND id > I)`, one index-only probe per row.
        indexes.append(
            models.Index(fields=["host_id", "alert_id", "id"], name=index_name(kind, "host_id", "alert_id", "id"))
        )
    for fields in TUPLE_INDEXES.get(kind, ()):
        indexes.append(models.Index(fields=list(fields), name=index_name(kind, *fields)))
    if kind == "skb_drop":
        # The buffers page's newest drops (`ORDER BY ts_ns DESC LIMIT 100`, of a host or of
        # all): a walk down an index instead of a sort of every drop (issue 31 item 4).
        indexes.append(models.Index(fields=["ts_ns"], name=index_name(kind, "ts_ns")))
        indexes.append(models.Index(fields=["host_id", "ts_ns"], name=index_name(kind, "host_id", "ts_ns")))
    if kind == "skb_event":
        # The buffers page's newest first sightings (dashboard/buffers._recent_uids), of all
        # hosts or of one: partial indexes per stage, only those rows, so ingest of the
        # other stages pays nothing; queried with the stage as a literal (SQLite matches a
        # partial index's condition only against the query's text, never a parameter).
        for stage in FIRST_STAGES:
            for names in (("ts_ns",), ("host_id", "ts_ns")):
                name = index_name(kind, *names, stage)
                indexes.append(models.Index(fields=list(names), condition=models.Q(stage=stage), name=name))
    for desc in describe(cls):
        if desc.index and desc.name not in SERVED_ELSEWHERE:
            # The field's own filter over a time range: drops by reason (drop summary
            # page), alerts by rule id -- `WHERE field = ? AND ts_wall BETWEEN ...`.
            indexes.append(models.Index(fields=[desc.name, "ts_wall"], name=index_name(kind, desc.name, "ts_wall")))
    return indexes


def record_constraints(cls: type[Record]) -> list[models.BaseConstraint]:
    kind = kind_of(cls)
    # Idempotent ingest: a record resent by the spool (same host, boot, seq) is stored once.
    return [models.UniqueConstraint(fields=["host_id", "boot_id", "seq"], name=index_name(kind, "uniq", "seq"))]

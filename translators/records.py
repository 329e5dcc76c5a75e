"""Stable record schemas: the one registry of every record nettrail produces, and their wire forms.

Every record type is a ``msgspec.Struct``. Each field carries its own documentation
(meaning, unit, presentation hints) in an ``Annotated`` ``msgspec.Meta``; the xo
formatter, the Django models, the ingest decoder, the websocket payloads and
``docs/records/`` all read these definitions through :func:`describe`. Nothing
else lists record fields.

The definitions live in one module per provider family, and this module is the
public face callers import from (``from translators.records import ...``):

- records_fields: vocabularies, doc(), the nullable aliases, FieldDesc and describe()
- records_envelope: Record and FlowRecord (the envelope), connection identities
- records_packets: ip_packet, udp_datagram, tcp_segment
- records_tcp: tcp provider events, connection, siftr_sample, tcpdebug_snapshot
- records_skb: skb lifecycle, sock events, per-flow counters
- records_health: self-health records and alerts

Here: the registry (``RECORD_TYPES`` in docs order, ``BY_KIND``, the ``AnyRecord``
union) and the JSON/msgpack encoders and decoders.

Keep in sync with: ``docs/providers`` semantics (``../shared/docs/providers.md``);
raw kernel events reach these records only through the translators. A new record
kind goes into its family module and into ``RECORD_TYPES``.
Schema changes: bump nothing silently, add a fix-up to ``UPGRADES`` instead.
"""

from __future__ import annotations

import functools
import typing
from typing import Any, Literal, Union

import msgspec

from translators.records_envelope import FlowRecord, Record, _decoding, connection_uuid, flow_uuid
from translators.records_fields import (
    CA_STATES,
    DEBUG_DIRECTIONS,
    LINUX_TCP_STATES,
    PROVIDERS,
    PRU_REQUESTS,
    SCHEMA,
    SEVERITIES,
    TCP_ANALYSIS_FLAGS,
    TCP_FLAG_NAMES,
    TCP_STATES,
    ZEEK_CONN_STATES,
    Blob,
    Bool,
    FieldDesc,
    Float,
    Int,
    Str,
    describe,
    doc,
    tcp_flags_str,
)
from translators.records_health import (
    Alert,
    CollectorStats,
    CollectorStatus,
    LossReport,
    SamplingReport,
    StackCounter,
)
from translators.records_packets import IpPacket, TcpSegment, UdpDatagram
from translators.records_skb import (
    DropCount,
    FlowCounters,
    IpFlowCounters,
    SkbDrop,
    SkbEvent,
    SkbRecord,
    SockEvent,
)
from translators.records_tcp import (
    FINDING_KINDS,
    AnalysisCounts,
    Connection,
    Finding,
    SiftrSample,
    TcpCongState,
    TcpDebugSnapshot,
    TcpLifecycle,
    TcpReset,
    TcpRetransmit,
    TcpStateChange,
)

__all__ = [
    "BY_KIND",
    "CA_STATES",
    "DEBUG_DIRECTIONS",
    "LINUX_TCP_STATES",
    "PROVIDERS",
    "PRU_REQUESTS",
    "RECORD_TYPES",
    "SCHEMA",
    "SEVERITIES",
    "TCP_ANALYSIS_FLAGS",
    "TCP_FLAG_NAMES",
    "TCP_STATES",
    "UPGRADES",
    "ZEEK_CONN_STATES",
    "Alert",
    "AnalysisCounts",
    "FINDING_KINDS",
    "Finding",
    "AnyRecord",
    "Blob",
    "Bool",
    "CollectorStats",
    "CollectorStatus",
    "Connection",
    "DropCount",
    "FieldDesc",
    "Float",
    "FlowCounters",
    "FlowRecord",
    "Int",
    "IpFlowCounters",
    "IpPacket",
    "LossReport",
    "Record",
    "SamplingReport",
    "SiftrSample",
    "SkbDrop",
    "SkbEvent",
    "SkbRecord",
    "SockEvent",
    "StackCounter",
    "Str",
    "TcpCongState",
    "TcpLifecycle",
    "TcpDebugSnapshot",
    "TcpReset",
    "TcpRetransmit",
    "TcpSegment",
    "TcpStateChange",
    "UdpDatagram",
    "connection_uuid",
    "decode_batch",
    "decode_trusted",
    "describe",
    "doc",
    "flow_uuid",
    "from_json",
    "from_msgpack",
    "tcp_flags_str",
    "to_builtins",
    "to_json",
    "to_msgpack",
]


RECORD_TYPES: tuple[type[Record], ...] = (
    IpPacket,
    UdpDatagram,
    TcpSegment,
    TcpStateChange,
    TcpRetransmit,
    TcpReset,
    TcpCongState,
    TcpLifecycle,
    Connection,
    SiftrSample,
    TcpDebugSnapshot,
    SkbEvent,
    SkbDrop,
    DropCount,
    SockEvent,
    FlowCounters,
    IpFlowCounters,
    LossReport,
    StackCounter,
    SamplingReport,
    CollectorStatus,
    CollectorStats,
    Alert,
)
BY_KIND: dict[str, type[Record]] = {t.__struct_config__.tag: t for t in RECORD_TYPES}  # type: ignore[misc]
for _kind, _cls in BY_KIND.items():
    # A plain class attribute per kind shadows the Record.kind property: `rec.kind` is
    # read per record on hot paths (ingest hooks, formatters) and a property call is
    # several times slower than an attribute lookup.
    type.__setattr__(_cls, "kind", _kind)
AnyRecord = Union[RECORD_TYPES]  # type: ignore[valid-type]  # noqa: UP007 (built from a tuple at runtime)


# --- wire forms ------------------------------------------------------------------------------------

# Fix-ups applied to decoded dicts of older schema versions, oldest first:
# {"netprov/0": [fn(dict) -> dict, ...]}.


def _v1_to_v2(record: dict[str, Any]) -> dict[str, Any]:
    """netprov/2 added collector_status.degraded: a netprov/1 collector named no degradations."""
    if record.get("kind") == "collector_status":
        record.setdefault("degraded", {})
    record["schema"] = "netprov/2"
    return record


UPGRADES: dict[str, list[typing.Callable[[dict[str, Any]], dict[str, Any]]]] = {"netprov/1": [_v1_to_v2]}

_json_encoder = msgspec.json.Encoder()
_msgpack_encoder = msgspec.msgpack.Encoder()


# The decoders are built on first use: building one for the union of every record type
# takes tens of milliseconds, which `nettrail analyze` (it never decodes) need not pay.
@functools.cache
def _decoder(fmt: Literal["json", "msgpack"], batch: bool) -> Any:
    tp: Any = list[AnyRecord] if batch else AnyRecord
    return msgspec.json.Decoder(tp) if fmt == "json" else msgspec.msgpack.Decoder(tp)


def to_json(record: Record) -> bytes:
    return _json_encoder.encode(record)


def to_msgpack(record: Record) -> bytes:
    return _msgpack_encoder.encode(record)


def from_json(data: bytes | str) -> Record:
    with _decoding():
        return typing.cast(Record, _decoder("json", False).decode(data))


def from_msgpack(data: bytes) -> Record:
    with _decoding():
        return typing.cast(Record, _decoder("msgpack", False).decode(data))


def decode_batch(data: bytes, content_type: Literal["json", "msgpack"], trusted: bool = False) -> list[Record]:
    """Decode a list of records; raises msgspec.ValidationError naming `$[index].field`.

    trusted: records nettrail validated itself before (the writers reading the ingest
    stream): msgspec's type checks only, not the vocabularies of __post_init__.
    """
    decoder = _decoder(content_type, True)
    with _decoding(trusted):
        return typing.cast(list[Record], decoder.decode(data))


def decode_trusted(decoder: Any, data: bytes) -> Any:
    """Decode with a caller's msgspec decoder (e.g. a narrower view of the record types,
    webapp/traces/view.py) data nettrail validated itself before: type checks only."""
    with _decoding(True):
        return decoder.decode(data)


def to_builtins(record: Record) -> dict[str, Any]:
    """The dict form (kind included) used for websocket payloads and templates."""
    return typing.cast(dict[str, Any], msgspec.to_builtins(record))

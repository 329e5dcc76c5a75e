"""Record vocabularies and field documentation: the words and the one field-description form every record module uses.

Holds the schema id, the closed vocabularies (FreeBSD TCP state names, CA states,
tcp debug directions and requests, flag names, Wireshark analysis flags, Zeek
connection states, severities), :func:`doc` (how a record field states its meaning,
unit and presentation hints), the nullable aliases the record modules annotate with,
and :func:`describe`, which turns a record class back into ordered :class:`FieldDesc`
rows for xo, the Django models, the websocket payloads and ``docs/records/``.

Keep in sync with: ``../shared/docs/providers.md`` (the vocabularies' numbering and
names), translators/records_envelope.py and the records_* modules (their annotations use
these aliases), translators/docgen.py (renders the FieldDesc rows).
"""

from __future__ import annotations

import functools
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Union

import msgspec

SCHEMA = "netprov/2"  # 2: collector_status.degraded (UPGRADES in records.py has the fix-up from 1)

# --- vocabularies -------------------------------------------------------------

PROVIDERS = ("ip", "udp", "udplite", "tcp", "tcpdebug", "siftr", "skb", "linux", "nettrail")

# A connection's `proto`: the IP protocol it rides on, by IANA keyword (lower case) where a
# capture is likely to carry it, else `ip-N`. One name per protocol number, so the number
# (Zeek's ip_proto) is always recoverable (IP_PROTO_NUMBERS) without a field of its own.
IP_PROTO_NAMES = {
    1: "icmp", 2: "igmp", 4: "ipip", 6: "tcp", 17: "udp", 41: "ipv6", 47: "gre", 50: "esp", 51: "ah",
    58: "icmp6", 59: "ipv6-nonxt", 88: "eigrp", 89: "ospf", 103: "pim", 112: "vrrp", 115: "l2tp", 132: "sctp",
    136: "udplite",
}  # fmt: skip
TRANSPORTS = tuple(IP_PROTO_NAMES.get(n, f"ip-{n}") for n in range(256))
IP_PROTO_NUMBERS = {name: n for n, name in enumerate(TRANSPORTS)}

# FreeBSD state names and numbers (providers.md 4.4); the stable numbering.
TCP_STATES = (
    "CLOSED",
    "LISTEN",
    "SYN_SENT",
    "SYN_RECEIVED",
    "ESTABLISHED",
    "CLOSE_WAIT",
    "FIN_WAIT_1",
    "CLOSING",
    "LAST_ACK",
    "FIN_WAIT_2",
    "TIME_WAIT",
)
# Linux `enum tcp_state` value -> FreeBSD name (NEW_SYN_RECV is a request socket).
LINUX_TCP_STATES = {
    1: "ESTABLISHED",
    2: "SYN_SENT",
    3: "SYN_RECEIVED",
    4: "FIN_WAIT_1",
    5: "FIN_WAIT_2",
    6: "TIME_WAIT",
    7: "CLOSED",
    8: "CLOSE_WAIT",
    9: "LAST_ACK",
    10: "LISTEN",
    11: "CLOSING",
    12: "SYN_RECEIVED",
    13: "CLOSED",
}
CA_STATES = ("Open", "Disorder", "CWR", "Recovery", "Loss")
# FreeBSD TA_* codes for tcp debug points (providers.md 5).
DEBUG_DIRECTIONS = ("input", "output", "user", "respond", "drop")
PRU_REQUESTS = (
    "ATTACH", "DETACH", "BIND", "LISTEN", "CONNECT", "ACCEPT", "DISCONNECT", "SHUTDOWN",
    "RCVD", "SEND", "ABORT", "CONTROL", "SENSE", "RCVOOB", "SENDOOB", "SOCKADDR",
    "PEERADDR", "CONNECT2", "FASTTIMO", "SLOWTIMO", "PROTORCV", "PROTOSEND", "SEND_EOF",
    "SOSETLABEL", "CLOSE", "FLUSH",
)  # fmt: skip
TCP_FLAG_NAMES = ("FIN", "SYN", "RST", "PUSH", "ACK", "URG", "ECE", "CWR")
# Wireshark tcp.analysis.* flags, in the order Wireshark prints them.
TCP_ANALYSIS_FLAGS = (
    "reused_ports",
    "retransmission",
    "fast_retransmission",
    "spurious_retransmission",
    "out_of_order",
    "lost_segment",
    "ack_lost_segment",
    "window_update",
    "window_full",
    "keep_alive",
    "keep_alive_ack",
    "duplicate_ack",
    "zero_window_probe",
    "zero_window",
    "zero_window_probe_ack",
)
ZEEK_CONN_STATES = (
    "S0", "S1", "SF", "REJ", "S2", "S3", "RSTO", "RSTR", "RSTOS0", "RSTRH", "SH", "SHR", "OTH",
)  # fmt: skip
SEVERITIES = ("info", "notice", "warning", "critical")


def tcp_flags_str(flags: int) -> str:
    """All set flags, in bit order: 0x12 -> 'SYN|ACK' (FreeBSD's tcp.d returned only one)."""
    return "|".join(name for bit, name in enumerate(TCP_FLAG_NAMES) if flags & (1 << bit))


# --- field documentation -------------------------------------------------------


def doc(
    text: str,
    *,
    unit: str | None = None,
    fmt: str | None = None,
    key: bool = False,
    brief: bool = False,
    choices: tuple[str, ...] | None = None,
    hexa: bool = False,
    index: bool = False,
) -> msgspec.Meta:
    """Describe a field once: meaning, unit and how it is shown.

    brief: shown in the one-line text/HTML view (all fields go to JSON/XML).
    key: identifies the instance (xo key field, leads the line).
    fmt: printf-style display format for text/HTML (encoding styles drop the width).
    choices: the only string values allowed. hexa: show as hex for humans.
    index: the dashboard queries by this field (the Django model indexes it).
    """
    extra: dict[str, Any] = {}
    for name, value in (("unit", unit), ("fmt", fmt), ("choices", choices)):
        if value is not None:
            extra[name] = value
    for name, flag in (("key", key), ("brief", brief), ("hexa", hexa), ("index", index)):
        if flag:
            extra[name] = True
    return msgspec.Meta(description=text, extra=extra)


Str = str | None
Int = int | None
Float = float | None
Bool = bool | None
Blob = bytes | None  # a module alias: UdpDatagram has a field named `bytes`


# --- field descriptions (the single source for xo, models, docs) -------------------------------


@dataclass(frozen=True)
class FieldDesc:
    name: str
    type: Any  # the Python type without None/Annotated: int, float, str, bool, list, dict, Struct
    nullable: bool
    required: bool
    description: str
    unit: str | None = None
    fmt: str | None = None
    key: bool = False
    brief: bool = False
    choices: tuple[str, ...] | None = None
    hexa: bool = False
    index: bool = False
    item_type: Any = None  # element type of list fields


def _strip(tp: Any) -> tuple[Any, bool, msgspec.Meta | None]:
    meta = None
    if typing.get_origin(tp) is Annotated:
        tp, *extras = typing.get_args(tp)
        meta = next((e for e in extras if isinstance(e, msgspec.Meta)), None)
    nullable = False
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        nullable = len(args) < len(typing.get_args(tp))
        tp = args[0] if len(args) == 1 else Union[tuple(args)]  # noqa: UP007 (built from a list at runtime)
    return tp, nullable, meta


@functools.cache
def describe(cls: type[msgspec.Struct]) -> tuple[FieldDesc, ...]:
    """Ordered field descriptions of a record type: envelope first, then its own fields."""
    hints = typing.get_type_hints(cls, include_extras=True)
    info = {f.name: f for f in msgspec.structs.fields(cls)}
    out = []
    for name, hint in hints.items():
        if name not in info:
            continue
        tp, nullable, meta = _strip(hint)
        extra = dict(meta.extra or {}) if meta is not None else {}
        origin = typing.get_origin(tp)
        item_type = typing.get_args(tp)[0] if origin is list else None
        f = info[name]
        out.append(
            FieldDesc(
                name=name,
                type=origin or tp,
                nullable=nullable,
                required=f.required,
                description=(meta.description or "") if meta is not None else "",
                unit=extra.get("unit"),
                fmt=extra.get("fmt"),
                key=bool(extra.get("key")),
                brief=bool(extra.get("brief")),
                choices=extra.get("choices"),
                hexa=bool(extra.get("hexa")),
                index=bool(extra.get("index")),
                item_type=item_type,
            )
        )
    return tuple(out)

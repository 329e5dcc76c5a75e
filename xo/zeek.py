"""Zeek conn.log (TSV) from nettrail connection summaries, for captures and live connections.

The layout is Zeek's ASCII writer's with its default settings and the Conn::Info fields
of Zeek 7 and later (base/protocols/conn/main.zeek; `ip_proto` is the last column): a
header of `#separator \\x09`, `#set_separator`, `#empty_field`, `#unset_field`, `#path`,
`#open`, `#fields` and `#types`, one tab-separated line per connection, and `#close` at
the end. Zeek's own rules are kept where nettrail has the value: `duration`,
`orig_bytes` and `resp_bytes` are only written when the duration is above zero, an
empty history is unset, a value that is only unset's `-` is escaped. Fields nettrail
does not know (`service`, `local_orig`, `local_resp`, `tunnel_parents`, and for live
connections `missed_bytes`) are written `-`, as Zeek writes an unset field.

ICMP and the other IP transports (analysis/flows/ip_flows.py) come with Zeek's ports (the
ICMP type and its counterpart or code; 0 and 0 for the rest), conn_state OTH and no history.

Live connections (source "kernel") have no per-direction wire counts: the kernel's
segments out / in are the packets and bytes acked / received the payload bytes; IP byte
counts stay unset. Their conn_state and history (the collector derives them) are in
Zeek's orientation, so a connection this host accepted is written with the remote side
as the originator when the writer is told (`local_orig=False`); otherwise the local
side is written as the originator, as in the record.
`#open` and `#close` are UTC (Zeek writes local time; the appliance runs in UTC).
Only translators is imported: the writer works in the collector, the CLI and the webapp.
Keep in sync with: docs/analyze.md ("Zeek conn.log"), tests/test_zeek_conn_log.py.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterable
from typing import TextIO

from translators.records import Connection
from translators.records_fields import IP_PROTO_NUMBERS

FIELDS: tuple[tuple[str, str], ...] = (
    ("ts", "time"),
    ("uid", "string"),
    ("id.orig_h", "addr"),
    ("id.orig_p", "port"),
    ("id.resp_h", "addr"),
    ("id.resp_p", "port"),
    ("proto", "enum"),
    ("service", "string"),
    ("duration", "interval"),
    ("orig_bytes", "count"),
    ("resp_bytes", "count"),
    ("conn_state", "string"),
    ("local_orig", "bool"),
    ("local_resp", "bool"),
    ("missed_bytes", "count"),
    ("history", "string"),
    ("orig_pkts", "count"),
    ("orig_ip_bytes", "count"),
    ("resp_pkts", "count"),
    ("resp_ip_bytes", "count"),
    ("tunnel_parents", "set[string]"),
    ("ip_proto", "count"),
)
UNSET = "-"
EMPTY = "(empty)"
SEPARATOR = "\t"
SET_SEPARATOR = ","
# Zeek's transport_proto enum: tcp, udp, icmp (ICMPv6 too) and unknown_transport for the
# rest (UDP-Lite, GRE, SCTP, ...); ip_proto (IP_PROTO_NUMBERS) still says what it was.
PROTO_ENUM = {("tcp", 4): "tcp", ("tcp", 6): "tcp", ("udp", 4): "udp", ("udp", 6): "udp", ("icmp", 4): "icmp",
              ("icmp6", 6): "icmp"}  # fmt: skip
BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def header_time(ts: float) -> str:
    """`#open`/`#close` stamp: Zeek's %Y-%m-%d-%H-%M-%S."""
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d-%H-%M-%S")


def escape(text: str) -> str:
    """Zeek ASCII writer escaping: separators, backslashes and non-printable characters
    as \\xNN; a value that reads as the unset or empty marker is escaped too."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in (SEPARATOR, SET_SEPARATOR, "\\") or code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        else:
            out.append(ch)
    value = "".join(out)
    if value in (UNSET, EMPTY):
        return f"\\x{ord(value[0]):02x}{value[1:]}"
    return value


def uid_of(rec: Connection) -> str:
    """A Zeek-style uid ('C' + base62 of 96 bits) from the record's conn_uuid, so the same
    connection gets the same uid in every export; records without one hash their identity."""
    ident = rec.conn_uuid or str(uuid.uuid5(uuid.NAMESPACE_URL, f"{rec.host_id}/{rec.boot_id}/{rec.seq}"))
    n = uuid.UUID(ident).int >> 32
    digits = []
    while n:
        n, r = divmod(n, 62)
        digits.append(BASE62[r])
    return "C" + "".join(reversed(digits or ["0"]))


def proto_enum(rec: Connection) -> str:
    """Zeek's `proto`; a live record has no ip_ver and is TCP or UDP. ICMP carried by the
    other IP version (protocol 1 in IPv6, 58 in IPv4) is no ICMP to Zeek either."""
    return PROTO_ENUM.get((rec.proto, rec.ip_ver or (6 if rec.proto == "icmp6" else 4)), "unknown_transport")


def _count(value: int | None) -> str:
    return UNSET if value is None else str(int(value))


def _opt(value: str | None) -> str:
    return UNSET if not value else escape(value)


def row(rec: Connection, local_orig: bool | None = None) -> list[str]:
    """The conn.log values of one connection, in FIELDS order. local_orig: for a live
    connection, whether this host opened it (a tcp_state record's `active`); False turns
    the local-first record around, so the originator is the side that sent the SYN, as
    the connection's conn_state and history (analysis/flows/live_summary.py) say."""
    live = rec.source == "kernel"
    pkts_o, pkts_r = (rec.segs_out, rec.segs_in) if live else (rec.packets_orig, rec.packets_resp)
    bytes_o, bytes_r = (rec.bytes_acked, rec.bytes_received) if live else (rec.bytes_orig, rec.bytes_resp)
    orig_h, orig_p, resp_h, resp_p = rec.src, rec.sport, rec.dst, rec.dport
    if live and local_orig is False:
        orig_h, orig_p, resp_h, resp_p = resp_h, resp_p, orig_h, orig_p
        pkts_o, pkts_r, bytes_o, bytes_r = pkts_r, pkts_o, bytes_r, bytes_o
    productive = rec.duration is not None and rec.duration > 0  # Zeek: set_conn(), `c$duration > 0secs`
    ts = rec.start if rec.start is not None else rec.ts_wall
    return [
        f"{ts:.6f}",
        uid_of(rec),
        _opt(orig_h),
        _count(orig_p),
        _opt(resp_h),
        _count(resp_p),
        proto_enum(rec),
        UNSET,  # service: nettrail does no protocol detection
        f"{rec.duration:.6f}" if productive and rec.duration is not None else UNSET,
        _count(bytes_o) if productive else UNSET,
        _count(bytes_r) if productive else UNSET,
        _opt(rec.conn_state),
        UNSET,  # local_orig: Site::local_nets is not configured
        UNSET,  # local_resp
        _count(0 if rec.missed_bytes is None and not live else rec.missed_bytes),  # Zeek: &default=0
        _opt(rec.history),
        _count(pkts_o),
        _count(None if live else rec.wire_bytes_orig),
        _count(pkts_r),
        _count(None if live else rec.wire_bytes_resp),
        UNSET,  # tunnel_parents: inner connections are not tied to their tunnels
        str(IP_PROTO_NUMBERS[rec.proto]),
    ]


class ZeekConnWriter:
    """Writes conn.log to a text stream: the header now, a line per write(), #close at close()."""

    def __init__(self, stream: TextIO, *, open_ts: float | None = None, flush: bool = False) -> None:
        self.stream = stream
        self.flush_each = flush
        self.closed = False
        names = SEPARATOR.join(name for name, _ in FIELDS)
        types = SEPARATOR.join(kind for _, kind in FIELDS)
        stream.write(
            "#separator \\x09\n"
            f"#set_separator{SEPARATOR}{SET_SEPARATOR}\n"
            f"#empty_field{SEPARATOR}{EMPTY}\n"
            f"#unset_field{SEPARATOR}{UNSET}\n"
            f"#path{SEPARATOR}conn\n"
            f"#open{SEPARATOR}{header_time(time.time() if open_ts is None else open_ts)}\n"
            f"#fields{SEPARATOR}{names}\n"
            f"#types{SEPARATOR}{types}\n"
        )

    def write(self, rec: Connection, local_orig: bool | None = None) -> None:
        self.stream.write(SEPARATOR.join(row(rec, local_orig)) + "\n")
        if self.flush_each:
            self.stream.flush()

    def write_all(self, records: Iterable[Connection]) -> int:
        n = 0
        for rec in records:
            self.write(rec)
            n += 1
        return n

    def close(self, close_ts: float | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        self.stream.write(f"#close{SEPARATOR}{header_time(time.time() if close_ts is None else close_ts)}\n")
        self.stream.flush()


def write_conn_log(
    stream: TextIO, records: Iterable[Connection], open_ts: float | None = None, close_ts: float | None = None
) -> int:
    """A whole conn.log; a capture passes its first and last packet times (as Zeek reading
    a trace stamps its logs with network time). -> the number of connections written."""
    writer = ZeekConnWriter(stream, open_ts=open_ts)
    n = writer.write_all(records)
    writer.close(close_ts)
    return n

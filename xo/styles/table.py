"""Text-style tables: each run of records of one kind is an aligned table with a header.

A record kind's columns come from translators.records.describe(): the time, the flow
(`addr:port` pairs), the other key fields and the short brief fields; long brief fields
(messages, lists, the process) wrap on indented lines under the record's row instead of
stretching it. Connections have their own columns (issue 17: proto, local/orig,
remote/resp, state, packets and bytes each way, duration, retransmissions, findings).
Values are for people (xo/human.py): ISO 8601 UTC times, or offsets with --relative,
humanised durations and byte counts, unless `no-humanize`.

Column widths fit the header and the rows held so far: rows are held until the table
ends, a flush, or CHUNK_ROWS of them (one with `flush`/`flush-line`, for live output),
so memory stays bounded; a later row wider than its column widens it and the header is
written again above that row. This is code, not a jinja2 template like the other styles'
records, because a row's layout depends on the rows around it.
Keep in sync with: docs/output.md ("The text style"), xo/styles/text.py (the caller).
"""

from __future__ import annotations

import functools
import shutil
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

import msgspec

from translators.records import SEVERITIES, Connection, FieldDesc, describe
from xo import human
from xo.escape import text_safe
from xo.fields import printf
from xo.options import XoOptions
from xo.records import display_format, kind_of

CHUNK_ROWS = 64
DEFAULT_WIDTH = 100  # wrap width when the output is not a terminal (files, pipes, tests)
DETAIL_INDENT = "    "
GAP = "  "
FINDINGS_MAX = 40  # a longer findings cell shows the first one and "+N"; all of them wrap below
# Envelope fields every record has: the kind names the provider, the probe and the time
# are the PROBE and TIME columns, the process goes on the detail line.
ENVELOPE_SHOWN_ELSEWHERE = frozenset({"ts_wall", "provider", "probe", "pid", "comm"})
# Free-text fields short enough to be a column (the others wrap under the row).
SHORT_STRINGS = frozenset(
    {"tcp_flags_str", "if_name", "protocol_name", "l4_proto", "stage", "reason", "condition", "direction",
     "setting", "event_type", "counter", "prureq_str", "drop_reason_str", "proto", "history"}
)  # fmt: skip
FLOW = ("src", "sport", "dst", "dport")
# tcp.analysis counts that say something went wrong (window updates, keep-alive ACKs and
# probe ACKs are normal life), in the words used by the findings column.
PROBLEM_FLAGS = (
    ("retransmission", None),  # shown in its own RETX column
    ("lost_segment", "not captured"),
    ("ack_lost_segment", "acked unseen"),
    ("out_of_order", "out of order"),
    ("duplicate_ack", "dup ack"),
    ("zero_window", "zero window"),
    ("window_full", "window full"),
    ("reused_ports", "reused ports"),
)
# A live connection's local side is LOCAL/ORIG: its kernel counters fill the wire counts
# columns (as in the Zeek conn.log, xo/zeek.py).
LIVE_COUNTERS = {"packets_orig": "segs_out", "packets_resp": "segs_in", "bytes_orig": "bytes_acked",
                 "bytes_resp": "bytes_received"}  # fmt: skip
STATE_WORDS = {
    "REJ": "refused",
    "RSTO": "reset by orig",
    "RSTR": "reset by resp",
    "RSTOS0": "reset by orig, no reply",
    "RSTRH": "reset by resp, no SYN seen",
    "S0": "no reply",
    "SH": "half-open",
    "SHR": "half-open",
}


class Clock:
    """Formats epoch times: ISO 8601 UTC, or offsets from the first time shown (--relative)."""

    def __init__(self, opts: XoOptions) -> None:
        self.opts = opts
        self.origin: float | None = None

    def time(self, ts: float) -> str:
        if self.opts.no_humanize:
            return f"{ts:.6f}"
        if self.opts.relative:
            if self.origin is None:
                self.origin = ts
            return human.relative_time(ts, self.origin)
        return human.iso_time(ts)


@dataclass(frozen=True)
class Column:
    header: str
    cell: Callable[[Any, Clock], str]
    right: bool = False  # numbers line up on the right


@dataclass(frozen=True)
class Layout:
    columns: tuple[Column, ...]
    details: Callable[[Any, Clock], list[tuple[str, str]]]


# --- cells -----------------------------------------------------------------------------------------


def is_epoch(d: FieldDesc) -> bool:
    return d.unit == "s" and "since the epoch" in d.description


def cell_text(d: FieldDesc, value: Any, clock: Clock) -> str:
    """One value for people: '-' when unset, times, durations and bytes humanised."""
    if value is None or value == [] or value == {}:
        return "-"
    raw = clock.opts.no_humanize
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    if isinstance(value, (int, float)) and not raw:
        if is_epoch(d):
            return clock.time(float(value))
        scale = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}.get(d.unit or "")
        if scale is not None:
            return human.duration(value * scale)
        if d.unit == "bytes":
            return human.byte_count(value)
    if is_epoch(d) and isinstance(value, (int, float)):
        return clock.time(float(value))
    text = printf(display_format(d), value)
    return f"{text} {d.unit}" if raw and d.unit else (f"{text} %" if d.unit == "%" else text)


def endpoint(host: Any, port: Any) -> str:
    """'10.0.0.5:443', '[fe80::1]:443', '*' parts for unknown values (as the old text line)."""
    h = "*" if host is None else str(host)
    if ":" in h:
        h = f"[{h}]"
    return f"{h}:{'*' if port is None else port}"


def process(rec: Any) -> str | None:
    comm, pid = getattr(rec, "comm", None), getattr(rec, "pid", None)
    if comm is None and pid is None:
        return None
    if comm is None:
        return f"pid {pid}"
    return f"{comm}[{pid}]" if pid is not None else str(comm)


def header_of(name: str) -> str:
    return name.replace("_", "-").upper()


def _value_cell(d: FieldDesc) -> Callable[[Any, Clock], str]:
    def cell(rec: Any, clock: Clock) -> str:
        value = getattr(rec, d.name)
        if d.key and value is None:
            return "*"
        return cell_text(d, value, clock)

    return cell


def _is_short(d: FieldDesc) -> bool:
    if d.type in (int, float, bool):
        return True
    return d.type is str and (d.choices is not None or d.name in SHORT_STRINGS)


# --- layouts ---------------------------------------------------------------------------------------


@functools.cache
def layout_of(cls: type[msgspec.Struct]) -> Layout:
    if cls is Connection:
        return connection_layout()
    descs = describe(cls)
    names = {d.name for d in descs}
    by_name = {d.name: d for d in descs}
    columns: list[Column] = []
    if "ts_wall" in names:
        columns.append(Column("TIME", _value_cell(by_name["ts_wall"])))
    columns.append(Column("PROBE", lambda r, c: r.probe))  # send/receive, m-free, ...: not implied by the kind
    flow = all(n in names for n in FLOW) and all(by_name[n].key for n in FLOW)
    if flow:
        columns.append(Column("SRC", lambda r, c: endpoint(r.src, r.sport)))
        columns.append(Column("DST", lambda r, c: endpoint(r.dst, r.dport)))
    long_fields: list[FieldDesc] = []
    for d in descs:
        if (flow and d.name in FLOW) or d.name in ENVELOPE_SHOWN_ELSEWHERE:
            continue
        if d.key or (d.brief and _is_short(d)):
            columns.append(Column(header_of(d.name), _value_cell(d), right=d.type in (int, float)))
        elif d.brief:
            long_fields.append(d)

    def details(rec: Any, clock: Clock) -> list[tuple[str, str]]:
        out = [(d.name.replace("_", "-"), cell_text(d, getattr(rec, d.name), clock)) for d in long_fields]
        out = [(label, text) for label, text in out if text != "-"]
        proc = process(rec)
        return out + ([("process", proc)] if proc else [])

    return Layout(tuple(columns), details)


def connection_layout() -> Layout:
    d = {x.name: x for x in describe(Connection)}

    def count(name: str) -> Callable[[Any, Clock], str]:
        live = LIVE_COUNTERS.get(name)  # kernel connections: the socket's own counters

        def cell(r: Any, c: Clock) -> str:
            value = getattr(r, name)
            if value is None and live is not None and r.source == "kernel":
                value = getattr(r, live)
            return cell_text(d[name], value, c)

        return cell

    columns = (
        Column("PROTO", lambda r, c: r.proto),
        Column("LOCAL/ORIG", lambda r, c: endpoint(r.src, r.sport)),
        Column("REMOTE/RESP", lambda r, c: endpoint(r.dst, r.dport)),
        Column("STATE", lambda r, c: r.conn_state or r.state or "-"),
        Column("PKTS>", count("packets_orig"), right=True),
        Column("BYTES>", count("bytes_orig"), right=True),
        Column("PKTS<", count("packets_resp"), right=True),
        Column("BYTES<", count("bytes_resp"), right=True),
        Column("DURATION", count("duration"), right=True),
        Column("RETX", lambda r, c: retransmissions(r), right=True),
        Column("FINDINGS", lambda r, c: findings_cell(findings(r))),
    )

    def details(rec: Any, clock: Clock) -> list[tuple[str, str]]:
        out = [("start", clock.time(rec.start))] if rec.start is not None else []
        if rec.history:
            out.append(("history", rec.history))
        if rec.icmp_error:
            out.append(("icmp", f"{rec.icmp_error} x{rec.icmp_errors or 1}"))
        own = getattr(rec, "findings", None)
        if own:  # each finding's sentence, under the row, after its severity
            out += [(f.severity, f.message) for f in own]
        else:
            found = findings(rec)
            if len(findings_cell(found)) < len("; ".join(found)):
                out.append(("findings", "; ".join(found)))
        proc = process(rec)
        return out + ([("process", proc)] if proc else [])

    return Layout(columns, details)


def retransmissions(rec: Any) -> str:
    """Retransmitted packets seen on the wire (captures) or counted by the kernel (live)."""
    if rec.analysis is not None:
        return str(rec.analysis.retransmission)
    return "-" if rec.total_retrans is None else str(rec.total_retrans)


def findings(rec: Any) -> list[str]:
    """What went wrong, in short words for the FINDINGS column: a record's own `findings`
    (captures, analysis/flows/findings.py), else the Zeek state's meaning and the problem
    tcp.analysis counts (live connections)."""
    own = getattr(rec, "findings", None)
    if own is not None:
        return [finding_label(f) for f in own]
    out = [STATE_WORDS[rec.conn_state]] if rec.conn_state in STATE_WORDS else []
    if rec.analysis is not None:
        for flag, words in PROBLEM_FLAGS:
            n = getattr(rec.analysis, flag)
            if words and n:
                out.append(f"{words} {n}")
    if rec.icmp_error:
        out.append(rec.icmp_error)
    return out


def finding_label(f: Any) -> str:
    """A finding in a few words (its sentence goes on the lines under the row)."""
    side = f" by {f.side}" if f.side else ""
    if f.kind == "reset":
        return f"reset{side}"
    if f.kind == "zero_window":
        return f"zero window{side} {f.ratio:.0%}" if f.ratio is not None else "zero window"
    if f.kind == "retransmissions":
        return f"retx{side} {f.ratio:.1%}" if f.ratio is not None else f"retx{side}"
    if f.kind == "syn_retries":
        return f"SYN retries {f.count}"
    if f.kind in ("out_of_order", "capture_incomplete") and f.count:
        return f"{f.kind.replace('_', ' ')} {f.count}"
    return str(f.kind).replace("_", " ").replace("half open", "half-open").replace("one sided", "one-sided")


def findings_cell(found: list[str]) -> str:
    if not found:
        return "-"
    text = ", ".join(found)
    return text if len(text) <= FINDINGS_MAX else f"{found[0]} +{len(found) - 1}"


# --- the printer -----------------------------------------------------------------------------------


@dataclass
class Table:
    kind: str
    layout: Layout
    widths: list[int]
    rows: list[tuple[list[str], list[tuple[str, str]]]] = field(default_factory=list)
    headed: tuple[int, ...] | None = None  # widths the header was last written with


class Tables:
    """Holds the current table of the text renderer; writes through `write`."""

    def __init__(self, write: Callable[[str], None], opts: XoOptions, stream: TextIO, clock: Clock) -> None:
        self.write = write
        self.opts = opts
        self.clock = clock
        self.chunk = 1 if opts.flush or opts.flush_line else CHUNK_ROWS
        self.width = terminal_width(stream)
        self.table: Table | None = None

    def add(self, rec: msgspec.Struct) -> bool:
        """Adds a row; -> True when it starts a new table (the caller separates it)."""
        kind = kind_of(type(rec))
        started = False
        if self.table is None or self.table.kind != kind:
            self.end()
            layout = layout_of(type(rec))
            self.table = Table(kind, layout, [len(c.header) for c in layout.columns])
            started = True
        t = self.table
        t.rows.append(([col.cell(rec, self.clock) for col in t.layout.columns], t.layout.details(rec, self.clock)))
        if len(t.rows) >= self.chunk:
            self.flush()
        return started

    def flush(self) -> None:
        t = self.table
        if t is None or not t.rows:
            return
        for cells, _ in t.rows:
            t.widths = [max(w, len(c)) for w, c in zip(t.widths, cells, strict=True)]
        out: list[str] = []
        if t.headed != tuple(t.widths):
            out.append(self._line([c.header for c in t.layout.columns], t))
            t.headed = tuple(t.widths)
        for cells, details in t.rows:
            out.append(self._line(cells, t))
            out.extend(self._details(details))
        t.rows.clear()
        self.write(text_safe("\n".join(out) + "\n"))

    def end(self) -> bool:
        """Ends the current table; -> True when there was one."""
        had = self.table is not None
        self.flush()
        self.table = None
        return had

    def _line(self, cells: list[str], t: Table) -> str:
        parts = [
            c.rjust(w) if col.right else c.ljust(w) for c, w, col in zip(cells, t.widths, t.layout.columns, strict=True)
        ]
        return GAP.join(parts).rstrip()

    def _details(self, details: list[tuple[str, str]]) -> list[str]:
        """Label-value items packed on indented lines, wrapped at the output width."""
        room = max(self.width - len(DETAIL_INDENT), 20)
        lines: list[str] = []
        current = ""
        for label, text in details:
            item = f"{label} {text}"
            solo = label in SEVERITIES  # a finding's sentence: a line of its own
            if current and not solo and len(current) + len(GAP) + len(item) <= room:
                current += GAP + item
                continue
            if current:
                lines.append(current)
            wrapped = textwrap.wrap(item, room, subsequent_indent="  ", break_on_hyphens=False) or [item]
            lines.extend(wrapped[:-1])
            current = wrapped[-1]
            if solo:
                lines.append(current)
                current = ""
        if current:
            lines.append(current)
        return [DETAIL_INDENT + line for line in lines]


def terminal_width(stream: TextIO) -> int:
    """The terminal's width when writing to one; a fixed width otherwise (stable files)."""
    isatty = getattr(stream, "isatty", None)
    if callable(isatty) and isatty():
        return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    return DEFAULT_WIDTH

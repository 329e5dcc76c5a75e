"""FreeBSD siftr(4) log files: write SiftrSample records as a SIFTR log, parse one back.

Three on-disk families (providers.md 6.4): 1.2.x (25-field data lines, srtt/rto in
kernel ticks, hash field), 1.3.0 (27 fields, µs, flowid/flowtype appended) and the
out-of-tree SIFTR2 2.x (21 fields keyed by flowid; per-flow constants in the footer's
flow_list). Header and footer are TAB-separated key=value lines, data lines are
comma-separated, every line ends with "\\n". Linux conventions (providers.md 6.5):
``sysname=Linux``, ``sysver`` = LINUX_VERSION_CODE, ``ipmode=6`` for 1.x, ``4`` for 2.x.

The log has no null: a record field that is None is written as 0 (documented in
docs/reports.md). Pure functions and streams, no I/O beyond the given file objects.

Three modules: siftr_log_header (versions, header/footer lines, column tables),
siftr_log_writer (records -> log) and this one (the data-line parser and the file
helpers); callers import all of it from here.

Keep in sync with: providers.md 6.4/6.5 (field order and units), the SiftrSample
fields in translators/records_tcp.py, collector/sources/siftr.py (import) and
webapp/reports/exports.py (export).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from translators.records import SiftrSample, flow_uuid
from translators.siftr_log_header import (
    COLUMNS,
    DEFAULT_VERSION,
    LINUX_HZ,
    TCP_RTT_SCALE,
    VERSIONS,
    SiftrFlow,
    SiftrFooter,
    SiftrHeader,
    SiftrLogError,
    family,
    format_address,
    is_siftr_log,
    linux_version_code,
    parse_address,
    parse_flowid,
    parse_footer,
    parse_header,
    skip_counter_names,
)
from translators.siftr_log_writer import SiftrLogWriter, write_log

__all__ = [
    "DEFAULT_VERSION",
    "VERSIONS",
    "SiftrFlow",
    "SiftrFooter",
    "SiftrHeader",
    "SiftrLog",
    "SiftrLogError",
    "SiftrLogParser",
    "SiftrLogWriter",
    "family",
    "format_address",
    "is_siftr_log",
    "iter_log",
    "last_line",
    "linux_version_code",
    "open_log",
    "read_log",
    "skip_counter_names",
    "write_log",
]

# --- parser -------------------------------------------------------------------------------


@dataclass
class SiftrLog:
    header: SiftrHeader
    footer: SiftrFooter | None
    samples: list[SiftrSample]


class SiftrLogParser:
    """Turns lines into SiftrSample records; 2.x needs the footer first (see read_log)."""

    def __init__(self, header: SiftrHeader, *, host_id: str, boot_id: str, source: str = "") -> None:
        self.header = header
        self.fam = family(header.version)
        self.host_id, self.boot_id, self.source = host_id, boot_id, source
        self.columns = COLUMNS[self.fam]
        self.width = len(self.columns) + (3 if self.fam == "1.2" else 2)
        self.flows2: dict[str, SiftrFlow] = {}
        self.flowid_values: dict[int, SiftrFlow] = {}
        self._streams: dict[tuple[str, int, str, int], int] = {}
        self.seq = 0

    def use_footer(self, footer: SiftrFooter) -> None:
        for flow in footer.flows:
            self.flows2[(flow.flowid_text or "").lower()] = flow
            if flow.flowid is not None:
                self.flowid_values[flow.flowid] = flow

    def parse_line(self, line: str, lineno: int) -> SiftrSample:
        cells = line.rstrip("\n").split(",")
        if len(cells) != self.width:
            raise SiftrLogError(
                lineno,
                f"expected {self.width} comma-separated fields for SIFTR {self.header.version}, got {len(cells)}",
                self.source,
            )
        if cells[0] not in ("i", "o"):
            raise SiftrLogError(lineno, f"direction must be i or o, got {cells[0][:10]!r}", self.source)
        try:
            return self._sample(cells, lineno)
        except ValueError as exc:
            raise SiftrLogError(lineno, str(exc), self.source) from None

    def _sample(self, cells: list[str], lineno: int) -> SiftrSample:
        rest = cells[3:] if self.fam == "1.2" else cells[2:]
        time_text = cells[2] if self.fam == "1.2" else cells[1]
        ts_wall, ts_ns = _parse_time(time_text)
        values: dict[str, Any] = {}
        for col, text in zip(self.columns, rest, strict=True):
            values[col] = text if col in ("@laddr", "@faddr", "@flowid") else _uint(col, text)
        fields = self._convert(values, lineno)
        self.seq += 1
        key = (fields["src"], fields["sport"], fields["dst"], fields["dport"])
        stream = self._streams.setdefault(key, len(self._streams))
        return SiftrSample(
            host_id=self.host_id, boot_id=self.boot_id, seq=self.seq, ts_ns=ts_ns, ts_wall=ts_wall,
            provider="siftr", probe="siftr", hook="file/siftr", direction="in" if cells[0] == "i" else "out",
            conn_uuid=flow_uuid(self.host_id, self.boot_id, "tcp", stream), **fields,
        )  # fmt: skip

    def _convert(self, v: dict[str, Any], lineno: int) -> dict[str, Any]:
        out = {k: x for k, x in v.items() if not k.startswith("@")}
        if self.fam == "2":
            flow = self._flow2(v["@flowid"], lineno)
            out.update(src=flow.laddr, sport=flow.lport, dst=flow.faddr, dport=flow.fport, flowid=flow.flowid)
            out.update(mss=flow.mss, snd_scale=flow.snd_scale, rcv_scale=flow.rcv_scale)
            out["sack_enabled"] = None if flow.sack is None else bool(flow.sack)
            if flow.tcp_cc is not None and not flow.tcp_cc.isdigit():
                out["cc_algo"] = flow.tcp_cc
        else:
            out.update(
                src=parse_address(v["@laddr"]), sport=v["@lport"], dst=parse_address(v["@faddr"]), dport=v["@fport"]
            )
            out["sack_enabled"] = bool(out["sack_enabled"])
        out["ip_ver"] = ipaddress.ip_address(out["src"]).version
        if self.fam == "1.2":
            hz, scale = self.header.hz or LINUX_HZ, self.header.tcp_rtt_scale or TCP_RTT_SCALE
            out["srtt"] = round(out["srtt"] * 1e6 / (hz * scale))
            out["rto"] = round(out["rto"] * 1e6 / hz)
        return out

    def _flow2(self, text: str, lineno: int) -> SiftrFlow:
        flow = self.flows2.get(text.lower())
        if flow is None:
            try:
                flow = self.flowid_values.get(parse_flowid(text, self.header.version))
            except ValueError:
                flow = None
        if flow is None:
            raise SiftrLogError(lineno, f"flowid {text[:20]!r} is not in the footer's flow_list", self.source)
        return flow


def _parse_time(text: str) -> tuple[float, int]:
    secs, dot, usecs = text.partition(".")
    if not dot or not secs.isdigit() or len(usecs) != 6 or not usecs.isdigit():
        raise ValueError(f"time must be secs.usecs with 6 digits, got {text[:30]!r}")
    return int(secs) + int(usecs) / 1e6, int(secs) * 1_000_000_000 + int(usecs) * 1000


def _uint(col: str, text: str) -> int:
    if not text.isdigit():
        raise ValueError(f"{col}: expected an unsigned integer, got {text[:30]!r}")
    return int(text)


def _is_footer(line: str) -> bool:
    return line.startswith("disable_time_secs=")


def iter_log(
    lines: Iterable[str], *, host_id: str, boot_id: str, source: str = "", footer_line: str | None = None
) -> Iterator[SiftrSample | SiftrHeader | SiftrFooter]:
    """Yields the header, then each sample, then the footer (if the log has one).

    2.x data lines need the footer's flow_list: pass `footer_line` (read_log does).
    """
    parser: SiftrLogParser | None = None
    footer_seen = False
    for lineno, line in enumerate(lines, 1):
        if parser is None:
            header = parse_header(line, lineno, source)
            parser = SiftrLogParser(header, host_id=host_id, boot_id=boot_id, source=source)
            if parser.fam == "2":
                if footer_line is None:
                    raise SiftrLogError(lineno, "SIFTR 2.x log has no footer (flow_list is needed)", source)
                parser.use_footer(parse_footer(footer_line, header.version, 0, source))
            yield header
        elif footer_seen:
            if line.strip():
                raise SiftrLogError(lineno, "data after the footer", source)
        elif _is_footer(line):
            footer_seen = True
            yield parse_footer(line, parser.header.version, lineno, source)
        elif line.strip():
            yield parser.parse_line(line, lineno)
    if parser is None:
        raise SiftrLogError(1, "empty file: no SIFTR header", source)


def last_line(path: str | os.PathLike[str]) -> str:
    """The final non-empty line, read from the end (flow_list lines can be long)."""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        end = fh.tell()
        chunk = 4096
        data = b""
        while True:
            start = max(0, end - chunk)
            fh.seek(start)
            data = fh.read(end - start)
            stripped = data.rstrip(b"\n")
            if b"\n" in stripped or start == 0:
                return stripped.rsplit(b"\n", 1)[-1].decode("ascii", "replace")
            chunk *= 2


def open_log(
    path: str | os.PathLike[str], *, host_id: str, boot_id: str
) -> Iterator[SiftrSample | SiftrHeader | SiftrFooter]:
    """Streams a log file (2.x: the footer is read from the end first)."""
    source = os.fspath(path)
    tail = last_line(path)
    footer_line = tail if _is_footer(tail) else None
    with open(path, encoding="ascii", errors="strict", newline="\n") as fh:
        try:
            yield from iter_log(fh, host_id=host_id, boot_id=boot_id, source=source, footer_line=footer_line)
        except UnicodeDecodeError as exc:
            raise SiftrLogError(0, f"not an ASCII SIFTR log ({exc.reason})", source) from None


def read_log(path: str | os.PathLike[str], *, host_id: str, boot_id: str) -> SiftrLog:
    """The whole log in memory (tests, small files); use open_log to stream."""
    header: SiftrHeader | None = None
    footer: SiftrFooter | None = None
    samples: list[SiftrSample] = []
    for item in open_log(path, host_id=host_id, boot_id=boot_id):
        if isinstance(item, SiftrHeader):
            header = item
        elif isinstance(item, SiftrFooter):
            footer = item
        else:
            samples.append(item)
    assert header is not None  # iter_log raises on a headerless file
    return SiftrLog(header, footer, samples)

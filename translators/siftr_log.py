"""FreeBSD siftr(4) log files: write SiftrSample records as a SIFTR log, parse one back.

Three on-disk families (providers.md 6.4): 1.2.x (25-field data lines, srtt/rto in
kernel ticks, hash field), 1.3.0 (27 fields, µs, flowid/flowtype appended) and the
out-of-tree SIFTR2 2.x (21 fields keyed by flowid; per-flow constants in the footer's
flow_list). Header and footer are TAB-separated key=value lines, data lines are
comma-separated, every line ends with "\\n". Linux conventions (providers.md 6.5):
``sysname=Linux``, ``sysver`` = LINUX_VERSION_CODE, ``ipmode=6`` for 1.x, ``4`` for 2.x.

The log has no null: a record field that is None is written as 0 (documented in
docs/reports.md). Pure functions and streams, no I/O beyond the given file objects.

Keep in sync with: providers.md 6.4/6.5 (field order and units), the SiftrSample
fields in translators/records.py, collector/sources/siftr.py (import) and
collector/export/siftr.py (export).
"""

from __future__ import annotations

import ipaddress
import os
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from translators.records import SiftrSample, flow_uuid

VERSIONS = ("1.2.3", "1.3.0", "2.0", "2.2")
DEFAULT_VERSION = "1.3.0"
TCP_RTT_SCALE = 32
LINUX_HZ = 250  # CONFIG_HZ of the target kernels; the 1.2 header records the value used

_HEADER_KEYS = {
    "1.2": ("enable_time_secs", "enable_time_usecs", "siftrver", "hz", "tcp_rtt_scale", "sysname", "sysver", "ipmode"),
    "1.3": ("enable_time_secs", "enable_time_usecs", "siftrver", "sysname", "sysver", "ipmode"),
    "2": ("enable_time_secs", "enable_time_usecs", "siftrver", "sysname", "sysver", "ipmode"),
}
_SKIP_COUNTERS_13 = (
    "num_inbound_skipped_pkts_malloc",
    "num_outbound_skipped_pkts_malloc",
    "num_inbound_skipped_pkts_tcpcb",
    "num_outbound_skipped_pkts_tcpcb",
    "num_inbound_skipped_pkts_inpcb",
    "num_outbound_skipped_pkts_inpcb",
)
_SKIP_COUNTERS_12 = (
    "num_inbound_skipped_pkts_malloc",
    "num_outbound_skipped_pkts_malloc",
    "num_inbound_skipped_pkts_mtx",
    "num_outbound_skipped_pkts_mtx",
    "num_inbound_skipped_pkts_tcpcb",
    "num_outbound_skipped_pkts_tcpcb",
    "num_inbound_skipped_pkts_inpcb",
    "num_outbound_skipped_pkts_inpcb",
)
_FOOTER_KEYS = {
    "1.2": (
        "disable_time_secs",
        "disable_time_usecs",
        "num_inbound_tcp_pkts",
        "num_outbound_tcp_pkts",
        "total_tcp_pkts",
        *_SKIP_COUNTERS_12,
        "total_skipped_tcp_pkts",
        "flow_list",
    ),
    "1.3": (
        "disable_time_secs",
        "disable_time_usecs",
        "num_inbound_tcp_pkts",
        "num_outbound_tcp_pkts",
        "total_tcp_pkts",
        *_SKIP_COUNTERS_13,
        "total_skipped_tcp_pkts",
        "flow_list",
    ),
    "2": (
        "disable_time_secs",
        "disable_time_usecs",
        "global_flow_cnt",
        "max_tmp_qsize",
        "avg_tmp_qsize",
        "max_str_size",
        "alq_getn_fail_cnt",
        "flow_list",
    ),
}
# The 2010 man page spells the last skip counters _tcb/_icb; the code prints _tcpcb/_inpcb.
_ALIASES = {"_tcb": "_tcpcb", "_icb": "_inpcb"}

# Data-line columns after direction and time, as SiftrSample attributes. Pseudo
# columns: "@hash", "@laddr", "@lport", "@faddr", "@fport", "@bwnd", "@flowid".
_COLUMNS_12 = (
    "@laddr", "@lport", "@faddr", "@fport", "snd_ssthresh", "snd_cwnd", "@bwnd", "snd_wnd", "rcv_wnd",
    "snd_scale", "rcv_scale", "conn_state", "mss", "srtt", "sack_enabled", "t_flags", "rto",
    "snd_buf_hiwater", "snd_buf_cc", "rcv_buf_hiwater", "rcv_buf_cc", "sent_inflight_bytes",
)  # fmt: skip
_COLUMNS_13 = (
    "@laddr", "@lport", "@faddr", "@fport", "snd_ssthresh", "snd_cwnd", "t_flags2", "snd_wnd", "rcv_wnd",
    "snd_scale", "rcv_scale", "conn_state", "mss", "srtt", "sack_enabled", "t_flags", "rto",
    "snd_buf_hiwater", "snd_buf_cc", "rcv_buf_hiwater", "rcv_buf_cc", "sent_inflight_bytes",
    "t_segqlen", "flowid", "flowtype",
)  # fmt: skip
_COLUMNS_2 = (
    "@flowid", "snd_cwnd", "snd_ssthresh", "snd_wnd", "rcv_wnd", "t_flags", "t_flags2", "conn_state",
    "srtt", "rto", "snd_buf_hiwater", "snd_buf_cc", "rcv_buf_hiwater", "rcv_buf_cc", "sent_inflight_bytes",
    "t_segqlen", "th_seq", "th_ack", "data_sz",
)  # fmt: skip
_COLUMNS = {"1.2": _COLUMNS_12, "1.3": _COLUMNS_13, "2": _COLUMNS_2}
# Fields the 2.x footer's flow_list carries once per flow instead of per line.
_FLOW_CONSTANTS = ("mss", "sack_enabled", "snd_scale", "rcv_scale")


class SiftrLogError(ValueError):
    """A malformed SIFTR log; names the line number (1-based)."""

    def __init__(self, lineno: int, message: str, source: str = "") -> None:
        self.lineno = lineno
        where = f"{source}:" if source else "line "
        super().__init__(f"{where}{lineno}: {message}")


@dataclass
class SiftrHeader:
    version: str
    enable_secs: int
    enable_usecs: int
    sysname: str = "Linux"
    sysver: int = 0
    ipmode: int = 6
    hz: int | None = None
    tcp_rtt_scale: int | None = None

    @property
    def enable_time(self) -> float:
        return self.enable_secs + self.enable_usecs / 1e6


@dataclass
class SiftrFlow:
    """One flow_list entry; the 2.x fields are None in 1.x logs."""

    laddr: str
    lport: int
    faddr: str
    fport: int
    flowid: int | None = None
    flowid_text: str | None = None
    mss: int | None = None
    sack: int | None = None
    snd_scale: int | None = None
    rcv_scale: int | None = None
    nrecord: int | None = None
    ntrans: int | None = None
    stack_type: int | None = None
    tcp_cc: str | None = None


@dataclass
class SiftrFooter:
    disable_secs: int
    disable_usecs: int
    counters: dict[str, int] = field(default_factory=dict)
    flows: list[SiftrFlow] = field(default_factory=list)


def family(version: str) -> str:
    """'1.2', '1.3' or '2': the on-disk layout a siftrver string uses."""
    if version.startswith("1.2"):
        return "1.2"
    if version.startswith("1.3"):
        return "1.3"
    if version.startswith("2."):
        return "2"
    raise ValueError(f"unsupported SIFTR version {version!r} (supported: 1.2.x, 1.3.x, 2.x)")


def skip_counter_names(version: str) -> tuple[str, ...]:
    """The footer's skip counters of a version (1.2 has the _mtx pair; 2.x has none)."""
    return tuple(k for k in _FOOTER_KEYS[family(version)] if "skipped_pkts_" in k)


def linux_version_code(release: str | None = None) -> int:
    """LINUX_VERSION_CODE of a release string: 6.18.44 -> 0x06122c (patch clamped to 255)."""
    release = release or os.uname().release
    parts = [int("".join(ch for ch in p if ch.isdigit()) or 0) for p in release.split("-")[0].split(".")[:3]]
    major, minor, patch = (parts + [0, 0, 0])[:3]
    return (major << 16) + (minor << 8) + min(patch, 255)


# --- time and address formatting -------------------------------------------------------


def split_time(ts_wall: float) -> tuple[int, int]:
    """Seconds and microseconds, rounded once so the 6 digits never read 1000000."""
    total = round(ts_wall * 1_000_000)
    return total // 1_000_000, total % 1_000_000


def format_time(ts_wall: float) -> str:
    secs, usecs = split_time(ts_wall)
    return f"{secs}.{usecs:06d}"


def format_address(addr: str, fam: str) -> str:
    """1.2 prints IPv6 uncompressed without leading zeros; 1.3+ compressed (ip6_sprintf)."""
    ip = ipaddress.ip_address(addr)
    if ip.version == 4 or fam != "1.2":
        return str(ip)
    return ":".join(f"{int(group, 16):x}" for group in ip.exploded.split(":"))


# --- writer ------------------------------------------------------------------------------


class SiftrLogWriter:
    """Streams a SIFTR log: header on construction, one line per sample, footer on close().

    Memory is one small entry per flow (for flow_list), never per sample.
    """

    def __init__(
        self,
        out: TextIO,
        *,
        version: str = DEFAULT_VERSION,
        enable_time: float,
        sysname: str = "Linux",
        sysver: int | None = None,
        hz: int = LINUX_HZ,
    ) -> None:
        self.out = out
        self.version = version
        self.fam = family(version)
        self.hz = hz
        self._flows: dict[tuple[str, int, str, int], SiftrFlow] = {}
        self._flowids: dict[int, tuple[str, int, str, int]] = {}
        self.inbound = 0
        self.outbound = 0
        self.last_time = enable_time
        ipmode = 4 if self.fam == "2" else 6
        self.header = SiftrHeader(version, *split_time(enable_time), sysname, sysver or linux_version_code(), ipmode)
        if self.fam == "1.2":
            self.header.hz, self.header.tcp_rtt_scale = hz, TCP_RTT_SCALE
        out.write(format_header(self.header))

    def write(self, sample: SiftrSample) -> None:
        if self.fam == "2" and sample.ip_ver == 6:
            raise ValueError("SIFTR 2.x logs are IPv4 only; use version 1.3.0 for IPv6 flows")
        flow = self._flow(sample)
        self.out.write(self._line(sample, flow))
        if sample.direction == "in":
            self.inbound += 1
        else:
            self.outbound += 1
        self.last_time = max(self.last_time, sample.ts_wall)

    def close(self, disable_time: float | None = None, skipped: dict[str, int] | None = None) -> SiftrFooter:
        """Writes the footer; `skipped` maps skip counter names to counts (others are 0)."""
        footer = SiftrFooter(*split_time(disable_time if disable_time is not None else self.last_time))
        footer.counters = self._counters(skipped or {})
        footer.flows = list(self._flows.values())
        self.out.write(format_footer(footer, self.version))
        return footer

    def _flow(self, s: SiftrSample) -> SiftrFlow:
        key = (s.src or "0.0.0.0", s.sport or 0, s.dst or "0.0.0.0", s.dport or 0)
        flow = self._flows.get(key)
        if flow is None:
            flow = SiftrFlow(*key, flowid=self._flowid_for(key, s.flowid), nrecord=0, ntrans=0)
            flow.mss, flow.snd_scale, flow.rcv_scale = s.mss or 0, s.snd_scale or 0, s.rcv_scale or 0
            flow.sack, flow.stack_type, flow.tcp_cc = int(bool(s.sack_enabled)), 0, _cc_code(s.cc_algo)
            self._flows[key] = flow
        flow.nrecord = (flow.nrecord or 0) + 1
        flow.ntrans = flow.nrecord  # every sample is written: transmitted == recorded
        return flow

    def _flowid_for(self, key: tuple[str, int, str, int], wanted: int | None) -> int:
        """The sample's flowid if free, else a CRC of the 4-tuple (2.x lines are keyed by it)."""
        candidate = wanted if wanted else zlib.crc32(repr(key).encode())
        while self._flowids.get(candidate, key) != key:
            candidate = (candidate + 1) & 0xFFFFFFFF
        self._flowids[candidate] = key
        return candidate

    def _line(self, s: SiftrSample, flow: SiftrFlow) -> str:
        head = ["i" if s.direction == "in" else "o"]
        if self.fam == "1.2":
            head.append("0x00000000")  # genhashes off (Linux has no equivalent)
        head.append(format_time(s.ts_wall))
        cells = [self._cell(s, flow, col) for col in _COLUMNS[self.fam]]
        return ",".join(head + cells) + "\n"

    def _cell(self, s: SiftrSample, flow: SiftrFlow, col: str) -> str:
        if col == "@laddr":
            return format_address(flow.laddr, self.fam)
        if col == "@faddr":
            return format_address(flow.faddr, self.fam)
        if col == "@lport":
            return str(flow.lport)
        if col == "@fport":
            return str(flow.fport)
        if col == "@flowid":
            return f"{flow.flowid:x}" if self.version != "2.0" else str(flow.flowid)
        if col == "@bwnd":
            return str(s.snd_cwnd or 0)  # FreeBSD stopped maintaining bwnd; cwnd is the honest stand-in
        if col == "flowid" and self.fam == "1.3":
            return str(flow.flowid)
        value: Any = getattr(s, col)
        if self.fam == "1.2" and col == "srtt":
            return str(round((value or 0) * self.hz * TCP_RTT_SCALE / 1e6))
        if self.fam == "1.2" and col == "rto":
            return str(round((value or 0) * self.hz / 1e6))
        return str(int(value or 0))

    def _counters(self, skipped: dict[str, int]) -> dict[str, int]:
        if self.fam == "2":
            return {
                "global_flow_cnt": len(self._flows),
                "max_tmp_qsize": 0,
                "avg_tmp_qsize": 0,
                "max_str_size": 0,
                "alq_getn_fail_cnt": skipped.get("alq_getn_fail_cnt", 0),
            }
        names = _SKIP_COUNTERS_12 if self.fam == "1.2" else _SKIP_COUNTERS_13
        unknown = set(skipped) - set(names)
        if unknown:
            raise ValueError(f"unknown skip counters for SIFTR {self.version}: {', '.join(sorted(unknown))}")
        skip = {name: skipped.get(name, 0) for name in names}
        total_skipped = sum(skip.values())
        inbound = self.inbound + sum(v for k, v in skip.items() if "_inbound_" in k)
        outbound = self.outbound + sum(v for k, v in skip.items() if "_outbound_" in k)
        return {
            "num_inbound_tcp_pkts": inbound,
            "num_outbound_tcp_pkts": outbound,
            "total_tcp_pkts": inbound + outbound,
            **skip,
            "total_skipped_tcp_pkts": total_skipped,
        }


def _cc_code(name: str | None) -> str:
    """SIFTR2 tcp_cc: 0 CUBIC, 1 NewReno; other algorithms keep their name."""
    if name in (None, "", "cubic"):
        return "0"
    if name in ("reno", "newreno"):
        return "1"
    return str(name)


def format_header(h: SiftrHeader) -> str:
    values = {
        "enable_time_secs": str(h.enable_secs),
        "enable_time_usecs": f"{h.enable_usecs:06d}",
        "siftrver": h.version,
        "hz": str(h.hz),
        "tcp_rtt_scale": str(h.tcp_rtt_scale),
        "sysname": h.sysname,
        "sysver": str(h.sysver),
        "ipmode": str(h.ipmode),
    }
    return "\t".join(f"{k}={values[k]}" for k in _HEADER_KEYS[family(h.version)]) + "\n"


def format_footer(f: SiftrFooter, version: str) -> str:
    fam = family(version)
    values = {"disable_time_secs": str(f.disable_secs), "disable_time_usecs": f"{f.disable_usecs:06d}"}
    values.update({k: str(v) for k, v in f.counters.items()})
    values["flow_list"] = format_flow_list(f.flows, version)
    return "\t".join(f"{k}={values[k]}" for k in _FOOTER_KEYS[fam]) + "\n"


def format_flow_list(flows: list[SiftrFlow], version: str) -> str:
    fam = family(version)
    if fam != "2":
        return "".join(
            f"{format_address(x.laddr, fam)};{x.lport}-{format_address(x.faddr, fam)};{x.fport}," for x in flows
        )
    entries = []
    for x in sorted(flows, key=lambda x: x.nrecord or 0):  # SIFTR2 sorts by ascending record count
        fid = str(x.flowid) if version == "2.0" else f"{x.flowid:x}"
        common = f"{fid},{x.laddr},{x.lport},{x.faddr},{x.fport},"
        if version == "2.0":
            entries.append(f"{common}{x.mss},{x.sack},{x.snd_scale},{x.rcv_scale},{x.nrecord};")
        else:
            entries.append(
                f"{common}{x.stack_type},{x.tcp_cc},{x.mss},{x.sack},{x.snd_scale},{x.rcv_scale},{x.nrecord},{x.ntrans};"
            )
    return "".join(entries)


def write_log(
    out: TextIO,
    samples: Iterable[SiftrSample],
    *,
    version: str = DEFAULT_VERSION,
    enable_time: float | None = None,
    disable_time: float | None = None,
    skipped: dict[str, int] | None = None,
    **header: Any,
) -> SiftrFooter:
    """Writes a whole log; enable_time defaults to the first sample's time."""
    it = iter(samples)
    first = next(it, None)
    start = enable_time if enable_time is not None else (first.ts_wall if first is not None else 0.0)
    writer = SiftrLogWriter(out, version=version, enable_time=start, **header)
    if first is not None:
        writer.write(first)
        for sample in it:
            writer.write(sample)
    return writer.close(disable_time, skipped)


# --- parser -------------------------------------------------------------------------------


@dataclass
class SiftrLog:
    header: SiftrHeader
    footer: SiftrFooter | None
    samples: list[SiftrSample]


def is_siftr_log(first_line: str) -> bool:
    """SIFTR logs start with the enable_time_secs= header key."""
    return first_line.startswith("enable_time_secs=")


def parse_header(line: str, lineno: int = 1, source: str = "") -> SiftrHeader:
    kv = _key_values(line, lineno, source)
    if "siftrver" not in kv or "enable_time_secs" not in kv:
        raise SiftrLogError(lineno, "not a SIFTR header (enable_time_secs= and siftrver= are required)", source)
    try:
        fam = family(kv["siftrver"])
    except ValueError as exc:
        raise SiftrLogError(lineno, str(exc), source) from None
    missing = [k for k in _HEADER_KEYS[fam] if k not in kv]
    if missing:
        raise SiftrLogError(lineno, f"header lacks {', '.join(missing)}", source)
    num = _int_reader(lineno, source)
    h = SiftrHeader(
        kv["siftrver"], num("enable_time_secs", kv), num("enable_time_usecs", kv), kv["sysname"],
        num("sysver", kv), num("ipmode", kv),
    )  # fmt: skip
    if fam == "1.2":
        h.hz, h.tcp_rtt_scale = num("hz", kv), num("tcp_rtt_scale", kv)
        if h.hz <= 0 or h.tcp_rtt_scale <= 0:
            raise SiftrLogError(lineno, "hz and tcp_rtt_scale must be positive", source)
    return h


def parse_footer(line: str, version: str, lineno: int = 0, source: str = "") -> SiftrFooter:
    kv = _key_values(line, lineno, source)
    fam = family(version)
    kv = {_canonical(k): v for k, v in kv.items()}
    missing = [k for k in _FOOTER_KEYS[fam] if k not in kv]
    if missing:
        raise SiftrLogError(lineno, f"footer lacks {', '.join(missing)}", source)
    num = _int_reader(lineno, source)
    counters = {k: num(k, kv) for k in _FOOTER_KEYS[fam][2:-1]}
    flows = _parse_flow_list(kv["flow_list"], version, lineno, source)
    return SiftrFooter(num("disable_time_secs", kv), num("disable_time_usecs", kv), counters, flows)


def _canonical(key: str) -> str:
    for old, new in _ALIASES.items():
        if key.endswith(old):
            return key[: -len(old)] + new
    return key


def _key_values(line: str, lineno: int, source: str) -> dict[str, str]:
    out = {}
    for part in line.rstrip("\n").split("\t"):
        key, sep, value = part.partition("=")
        if not sep:
            raise SiftrLogError(lineno, f"expected key=value, got {part[:40]!r}", source)
        out[key] = value
    return out


def _int_reader(lineno: int, source: str) -> Any:
    def num(key: str, kv: dict[str, str]) -> int:
        try:
            return int(kv[key])
        except ValueError:
            raise SiftrLogError(lineno, f"{key}: not an integer: {kv[key][:40]!r}", source) from None

    return num


def _parse_flow_list(text: str, version: str, lineno: int, source: str) -> list[SiftrFlow]:
    fam = family(version)
    flows = []
    try:
        if fam != "2":
            for entry in filter(None, text.split(",")):
                local, _, foreign = entry.partition("-")
                laddr, lport = local.rsplit(";", 1)
                faddr, fport = foreign.rsplit(";", 1)
                flows.append(SiftrFlow(_addr(laddr), int(lport), _addr(faddr), int(fport)))
            return flows
        for entry in filter(None, text.split(";")):
            flows.append(_parse_flow2(entry.split(","), version))
    except (ValueError, IndexError):
        raise SiftrLogError(lineno, f"malformed flow_list entry in {text[:60]!r}", source) from None
    return flows


def _parse_flow2(p: list[str], version: str) -> SiftrFlow:
    flow = SiftrFlow(_addr(p[1]), int(p[2]), _addr(p[3]), int(p[4]), flowid=_flowid(p[0], version), flowid_text=p[0])
    if len(p) == 10:  # 2.0: mss,sack,snd_scale,rcv_scale,nrecord
        flow.mss, flow.sack, flow.snd_scale, flow.rcv_scale, flow.nrecord = map(int, p[5:10])
    elif len(p) == 13:  # 2.2: stack_type,tcp_cc,mss,sack,snd_scale,rcv_scale,nrecord,ntrans
        flow.stack_type, flow.tcp_cc = int(p[5]), p[6]
        flow.mss, flow.sack, flow.snd_scale, flow.rcv_scale, flow.nrecord, flow.ntrans = map(int, p[7:13])
    else:
        raise ValueError(f"{len(p)} fields")
    return flow


def _addr(text: str) -> str:
    """Normalise to the stable form (compressed IPv6); 1.2's uncompressed form parses too."""
    return str(ipaddress.ip_address(text))


def _flowid(text: str, version: str) -> int:
    """2.0 prints flowid in decimal; later 2.x in hex (the companion tool parses hex)."""
    t = text.lower()
    if t.startswith("0x") or any(c in "abcdef" for c in t) or version != "2.0":
        return int(t, 16)
    return int(t, 10)


class SiftrLogParser:
    """Turns lines into SiftrSample records; 2.x needs the footer first (see read_log)."""

    def __init__(self, header: SiftrHeader, *, host_id: str, boot_id: str, source: str = "") -> None:
        self.header = header
        self.fam = family(header.version)
        self.host_id, self.boot_id, self.source = host_id, boot_id, source
        self.columns = _COLUMNS[self.fam]
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
            out.update(src=_addr(v["@laddr"]), sport=v["@lport"], dst=_addr(v["@faddr"]), dport=v["@fport"])
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
                flow = self.flowid_values.get(_flowid(text, self.header.version))
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

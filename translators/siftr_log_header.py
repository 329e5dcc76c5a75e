"""SIFTR log header and footer: the versions, their key=value lines, the flow list, and the shared column tables.

Everything about a log that is not a data line: which families exist (1.2.x, 1.3.0,
2.x) and their header/footer keys, the enable/disable times, the skip counters, the
footer's flow_list (per-flow constants in 2.x), formatting and parsing of those lines,
plus the data-line column tables and time/address formatting that the writer
(translators/siftr_log_writer.py) and the row parser (translators/siftr_log.py) share.

Keep in sync with: providers.md 6.4/6.5 (key order, units), translators/siftr_log.py
and translators/siftr_log_writer.py (which use these tables).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from typing import Any

VERSIONS = ("1.2.3", "1.3.0", "2.0", "2.2")
DEFAULT_VERSION = "1.3.0"
TCP_RTT_SCALE = 32
LINUX_HZ = 250  # CONFIG_HZ of the target kernels; the 1.2 header records the value used

_HEADER_KEYS = {
    "1.2": ("enable_time_secs", "enable_time_usecs", "siftrver", "hz", "tcp_rtt_scale", "sysname", "sysver", "ipmode"),
    "1.3": ("enable_time_secs", "enable_time_usecs", "siftrver", "sysname", "sysver", "ipmode"),
    "2": ("enable_time_secs", "enable_time_usecs", "siftrver", "sysname", "sysver", "ipmode"),
}
SKIP_COUNTERS_13 = (
    "num_inbound_skipped_pkts_malloc",
    "num_outbound_skipped_pkts_malloc",
    "num_inbound_skipped_pkts_tcpcb",
    "num_outbound_skipped_pkts_tcpcb",
    "num_inbound_skipped_pkts_inpcb",
    "num_outbound_skipped_pkts_inpcb",
)
SKIP_COUNTERS_12 = (
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
        *SKIP_COUNTERS_12,
        "total_skipped_tcp_pkts",
        "flow_list",
    ),
    "1.3": (
        "disable_time_secs",
        "disable_time_usecs",
        "num_inbound_tcp_pkts",
        "num_outbound_tcp_pkts",
        "total_tcp_pkts",
        *SKIP_COUNTERS_13,
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
COLUMNS = {"1.2": _COLUMNS_12, "1.3": _COLUMNS_13, "2": _COLUMNS_2}
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


# --- header and footer lines ---------------------------------------------------------------


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
                flows.append(SiftrFlow(parse_address(laddr), int(lport), parse_address(faddr), int(fport)))
            return flows
        for entry in filter(None, text.split(";")):
            flows.append(_parse_flow2(entry.split(","), version))
    except (ValueError, IndexError):
        raise SiftrLogError(lineno, f"malformed flow_list entry in {text[:60]!r}", source) from None
    return flows


def _parse_flow2(p: list[str], version: str) -> SiftrFlow:
    flow = SiftrFlow(
        parse_address(p[1]),
        int(p[2]),
        parse_address(p[3]),
        int(p[4]),
        flowid=parse_flowid(p[0], version),
        flowid_text=p[0],
    )
    if len(p) == 10:  # 2.0: mss,sack,snd_scale,rcv_scale,nrecord
        flow.mss, flow.sack, flow.snd_scale, flow.rcv_scale, flow.nrecord = map(int, p[5:10])
    elif len(p) == 13:  # 2.2: stack_type,tcp_cc,mss,sack,snd_scale,rcv_scale,nrecord,ntrans
        flow.stack_type, flow.tcp_cc = int(p[5]), p[6]
        flow.mss, flow.sack, flow.snd_scale, flow.rcv_scale, flow.nrecord, flow.ntrans = map(int, p[7:13])
    else:
        raise ValueError(f"{len(p)} fields")
    return flow


def parse_address(text: str) -> str:
    """Normalise to the stable form (compressed IPv6); 1.2's uncompressed form parses too."""
    return str(ipaddress.ip_address(text))


def parse_flowid(text: str, version: str) -> int:
    """2.0 prints flowid in decimal; later 2.x in hex (the companion tool parses hex)."""
    t = text.lower()
    if t.startswith("0x") or any(c in "abcdef" for c in t) or version != "2.0":
        return int(t, 16)
    return int(t, 10)

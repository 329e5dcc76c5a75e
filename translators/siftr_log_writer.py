"""SIFTR log writer: SiftrSample records -> the data lines of one log version, with its header and footer.

Streams: the header is written when the writer opens, one line per sample, and the
footer (with the skip counters and, in 2.x, the flow list) when it closes. A record
field that is None is written as 0 (the log has no null; docs/reports.md).

Keep in sync with: translators/siftr_log_header.py (column tables, header/footer
lines), the SiftrSample fields in translators/records_tcp.py, webapp/reports/exports.py.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import Any, TextIO

from translators.records import SiftrSample
from translators.siftr_log_header import (
    COLUMNS,
    DEFAULT_VERSION,
    LINUX_HZ,
    SKIP_COUNTERS_12,
    SKIP_COUNTERS_13,
    TCP_RTT_SCALE,
    SiftrFlow,
    SiftrFooter,
    SiftrHeader,
    family,
    format_address,
    format_footer,
    format_header,
    format_time,
    linux_version_code,
    split_time,
)

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
        self.polled = 0
        self.last_time = enable_time
        ipmode = 4 if self.fam == "2" else 6
        self.header = SiftrHeader(version, *split_time(enable_time), sysname, sysver or linux_version_code(), ipmode)
        if self.fam == "1.2":
            self.header.hz, self.header.tcp_rtt_scale = hz, TCP_RTT_SCALE
        out.write(format_header(self.header))

    def write(self, sample: SiftrSample) -> None:
        """One data line; a siftr-poll sample (no packet behind it) is counted in `polled`, not
        written: each line of a SIFTR log is a packet, in or out."""
        if sample.direction == "poll":
            self.polled += 1
            return
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
        cells = [self._cell(s, flow, col) for col in COLUMNS[self.fam]]
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
        names = SKIP_COUNTERS_12 if self.fam == "1.2" else SKIP_COUNTERS_13
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

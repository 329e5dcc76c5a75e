"""Capture pipeline: decoded packet batches -> TCP analysis, UDP, ICMP and other IP flows, ICMP correlation -> records.

Shared by ``nettrail analyze`` (files) and ``nettrail capture`` (live capture): both
hand it decoded batches in capture order, read through translators/packet_view.py (numpy
columns from translators/packet.py, or Python lists from translators/packet_rows.py for
a small file: this module imports no numpy, so a small capture never loads it). It keeps
per-connection state only (never the packets), so memory grows with the number of
connections, not with the file.

Identity: records carry host_id = the capture name, boot_id = a capture id (sha256
prefix of the file for files), conn_uuid = ``flow_uuid(host, boot, proto, stream)``.

Keep in sync with: analysis/flows/tcp_analysis.py, tcp_state.py, conn_summary.py, ip_flows.py, pcap_rules.py,
translators/packet.py (kind codes), docs/analyze.md (output contract, totals names).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from analysis.alerts.pcap_rules import AlertSink, Thresholds, evaluate, p7
from analysis.flows import conn_summary as zeek
from analysis.flows import tcp_fast
from analysis.flows.findings import tcp_findings, udp_findings
from analysis.flows.ip_flows import IpFlows
from analysis.flows.ip_flows import connection as ip_connection
from analysis.flows.tcp_analysis import TcpAnalyzer
from analysis.flows.tcp_state import Conv, counts_of, flag_names
from translators.packet_layers import K_ICMP, K_IP, K_MALFORMED, K_TCP, K_UDP, addr_str
from translators.packet_records import packet_records, tcp_record
from translators.packet_view import PacketView
from translators.records import Alert, Connection, Finding, Record, flow_uuid

MAX_WARNINGS = 10


@dataclass
class Totals:
    """The `totals` container of `nettrail analyze` (names are part of the output contract)."""

    packets: int = 0
    bytes_captured: int = 0
    bytes_wire: int = 0
    packets_ip: int = 0
    packets_tcp: int = 0
    packets_udp: int = 0
    packets_icmp: int = 0
    packets_other_ip: int = 0
    packets_non_ip: int = 0
    packets_malformed: int = 0
    records_damaged: int = 0
    packets_dropped: int = 0  # live capture: dropped by the kernel before they were read
    fragments: int = 0
    icmp_unreachable: int = 0
    connections_tcp: int = 0
    connections_udp: int = 0
    first_ts: float | None = None
    last_ts: float | None = None
    warnings: list[str] = field(default_factory=list)
    # packets not decoded, by what they were (translators/linklayers.py labels)
    undecoded: dict[str, int] = field(default_factory=dict)


@dataclass
class UdpFlow:
    stream: int
    orig: tuple[int, int]
    resp: tuple[int, int]
    ip_ver: int
    proto: str
    first_ts: int
    last_ts: int = 0
    packets: list[int] = field(default_factory=lambda: [0, 0])
    bytes: list[int] = field(default_factory=lambda: [0, 0])
    wire: list[int] = field(default_factory=lambda: [0, 0])
    z: zeek.ZeekFlow = field(default_factory=zeek.ZeekFlow)
    icmp_error: str | None = None
    icmp_errors: int = 0


class CapturePipeline:
    """Feed decoded batches (:class:`PacketView`); read connections, totals and alerts at the end."""

    def __init__(
        self, host_id: str, boot_id: str, packets: bool = False, hook: str = "pcap", compat: str = "upstream"
    ) -> None:
        self.host_id = host_id
        self.boot_id = boot_id
        self.want_packets = packets
        self.hook = hook
        self.tcp = TcpAnalyzer(keep_results=packets, compat=compat)
        self.udp: dict[tuple[int, int, int, int], UdpFlow] = {}
        self.udp_list: list[UdpFlow] = []
        self.ip_flows = IpFlows()  # ICMP and the other transports: Zeek's conn.log rows for them
        self.totals = Totals()
        self.seq = 0
        self._findings: dict[int, list[Finding]] = {}  # tcp stream -> its findings, derived once

    # --- feeding -------------------------------------------------------------------

    def feed(self, d: PacketView) -> Iterator[Record]:
        """Process one batch; yields per-packet records only when packets=True."""
        t = self.totals
        t.packets += d.n
        t.bytes_captured += d.caplen_total()
        t.bytes_wire += d.wirelen_total()
        if d.n:
            first, last = d.ts_at(0) / 1e9, d.ts_at(d.n - 1) / 1e9
            t.first_ts = first if t.first_ts is None else t.first_ts
            t.last_ts = last
        if not self.want_packets:
            tcp_fast.feed(self.tcp, d)
            t.packets_tcp += d.count_kind(K_TCP)
            t.fragments += d.count_fragments()
            for i in d.not_kind(K_TCP):
                self._other(d, i)
            return
        t.fragments += d.count_fragments()
        tcp_packet = self.tcp.packet
        kinds = d.kind
        for i in range(d.n):
            if kinds[i] == K_TCP:
                t.packets_tcp += 1
                res = tcp_packet(
                    d.frame[i], d.ts_ns[i], d.ip_ver[i], d.src[i], d.sport[i], d.dst[i], d.dport[i], d.seq[i], d.ack[i],
                    d.flags[i], d.window[i], d.payload[i], d.ip_len[i], d.option_map.get(i),
                )  # fmt: skip
                if res is not None:
                    yield from self._tcp_records(d, i, res)
            elif self._other(d, i):
                yield from packet_records(d, i, self._env(d.ts_ns[i]))

    def _other(self, d: PacketView, i: int) -> bool:
        """A non-TCP packet: count it, track UDP flows and ICMP errors. -> it is an IP packet."""
        t = self.totals
        k = d.value("kind", i)
        if k == K_UDP:
            t.packets_udp += 1
            self._udp(d, i)
        elif k == K_ICMP:
            t.packets_icmp += 1
            self._icmp(d, i)
            self.ip_flows.icmp(d, i)
        elif k == K_IP:
            t.packets_other_ip += 1
            if d.value("fragment", i) == 0:  # fragments are not reassembled: no transport to name
                self.ip_flows.other(d, i)
        elif k == K_MALFORMED:
            t.packets_malformed += 1
            if len(t.warnings) < MAX_WARNINGS:
                off = d.file_offset(i)
                t.warnings.append(
                    f"frame {d.first_frame + i} at byte offset {off}: {d.reasons.get(i, 'malformed')}; skipped"
                )
            return False
        else:
            t.packets_non_ip += 1
            label = d.reasons.get(i, "not IP")
            t.undecoded[label] = t.undecoded.get(label, 0) + 1
            return False
        return True

    def _udp(self, d: PacketView, i: int) -> None:
        v = d.value
        src, dst = d.v6.get(i) or (v("src", i), v("dst", i))
        sport, dport, payload, ip_len = v("sport", i), v("dport", i), v("payload", i), v("ip_len", i)
        key = (src, sport, dst, dport) if (src, sport) <= (dst, dport) else (dst, dport, src, sport)
        flow = self.udp.get(key)
        ts = d.ts_at(i)
        if flow is None:
            proto = "udp" if v("proto", i) == 17 else "udplite"
            flow = UdpFlow(len(self.udp_list), (src, sport), (dst, dport), v("ip_ver", i), proto, ts)
            self.udp[key] = flow
            self.udp_list.append(flow)
        side = 0 if (src, sport) == flow.orig else 1
        flow.packets[side] += 1
        flow.bytes[side] += payload
        flow.wire[side] += ip_len
        flow.last_ts = ts
        zeek.udp_event(flow.z, side == 0, payload)

    def _icmp(self, d: PacketView, i: int) -> None:
        q = d.icmp.get(i)
        if q is None:
            return
        self.totals.icmp_unreachable += 1
        key = (
            (q.src, q.sport, q.dst, q.dport)
            if (q.src, q.sport) <= (q.dst, q.dport)
            else (q.dst, q.dport, q.src, q.sport)
        )
        target: Conv | UdpFlow | None = self.udp.get(key) if q.proto == 17 else self.tcp.active.get(key)
        if target is not None:
            target.icmp_error = q.error
            target.icmp_errors += 1

    # --- records ---------------------------------------------------------------------

    def _env(self, ts_ns: int, conv_uuid: str | None = None) -> dict[str, Any]:
        self.seq += 1
        return {
            "host_id": self.host_id, "boot_id": self.boot_id, "seq": self.seq, "ts_ns": ts_ns,
            "ts_wall": ts_ns / 1e9, "hook": self.hook, "conn_uuid": conv_uuid,
        }  # fmt: skip

    def _tcp_records(self, d: PacketView, i: int, res: Any) -> Iterator[Record]:
        env = self._env(d.ts_ns[i], flow_uuid(self.host_id, self.boot_id, "tcp", res.conv.stream))
        yield from packet_records(d, i, env)[:1]
        seg = tcp_record(d, i, env)
        seg.rel_seq = res.rel_seq
        seg.rel_ack = res.rel_ack
        seg.window_scaled = res.window_scaled
        seg.direction = "orig" if res.is_orig else "resp"
        seg.stream = res.conv.stream
        seg.analysis = flag_names(res.flags)
        seg.dup_ack_num = res.dupnum or None
        seg.dup_ack_frame = res.dupframe or None
        seg.ack_rtt_us = res.ack_rtt_ns // 1000 if res.ack_rtt_ns is not None else None
        seg.bytes_in_flight = res.bytes_in_flight
        yield seg

    def endpoints(self, conv: Conv) -> tuple[str, int, str, int, int]:
        assert conv.orig is not None
        resp = conv.flow2 if conv.orig is conv.flow1 else conv.flow1
        return addr_str(conv.orig.addr), conv.orig.port, addr_str(resp.addr), resp.port, conv.ip_ver

    def connections(self) -> list[Connection]:
        out = [self._tcp_connection(c) for c in self.tcp.conversations]
        out += [self._udp_connection(f) for f in self.udp_list]
        out += [
            ip_connection(f, self._env(f.first_ts, flow_uuid(self.host_id, self.boot_id, f.proto, f.stream)))
            for f in self.ip_flows.flows
        ]
        self.totals.connections_tcp = len(self.tcp.conversations)
        self.totals.connections_udp = len(self.udp_list)
        return out

    def _tcp_connection(self, conv: Conv) -> Connection:
        assert conv.orig is not None
        self.tcp.settle_all(conv)
        o = conv.orig
        r = conv.flow2 if o is conv.flow1 else conv.flow1
        src, sport, dst, dport, ver = self.endpoints(conv)
        env = self._env(conv.first_ts, flow_uuid(self.host_id, self.boot_id, "tcp", conv.stream))
        state = zeek.conn_state(conv.z, "tcp")
        rtt = [
            (f.rtt_min // 1000, f.rtt_sum // f.rtt_n // 1000, f.rtt_max // 1000) if f.rtt_n else (None, None, None)
            for f in (o, r)
        ]
        return Connection(
            **env, provider="tcp", probe="connection", proto="tcp", ip_ver=ver, src=src, sport=sport, dst=dst, dport=dport,
            start=conv.first_ts / 1e9, end=conv.last_ts / 1e9, duration=(conv.last_ts - conv.first_ts) / 1e9,
            packets_orig=o.packets, packets_resp=r.packets, bytes_orig=o.bytes, bytes_resp=r.bytes,
            wire_bytes_orig=o.wire_bytes, wire_bytes_resp=r.wire_bytes,
            conn_state=state, history=zeek.history(conv.z), direction_guessed=conv.guessed,
            stream=conv.stream, handshake_rtt_us=conv.first_rtt // 1000 if conv.first_rtt else None,
            retrans_bytes=o.retrans_bytes + r.retrans_bytes, completeness=conv.completeness, missed_bytes=o.missed + r.missed,
            analysis=counts_of(conv), icmp_error=conv.icmp_error, icmp_errors=conv.icmp_errors or None,
            rtt_orig_min_us=rtt[0][0], rtt_orig_mean_us=rtt[0][1], rtt_orig_max_us=rtt[0][2],
            rtt_resp_min_us=rtt[1][0], rtt_resp_mean_us=rtt[1][1], rtt_resp_max_us=rtt[1][2],
            findings=self.findings_of(conv, state),
        )  # fmt: skip

    def findings_of(self, conv: Conv, state: str | None = None) -> list[Finding]:
        found = self._findings.get(conv.stream)
        if found is None:
            found = tcp_findings(conv, state or zeek.conn_state(conv.z, "tcp"))
            self._findings[conv.stream] = found
        return found

    def _udp_connection(self, f: UdpFlow) -> Connection:
        env = self._env(f.first_ts, flow_uuid(self.host_id, self.boot_id, f.proto, f.stream))
        return Connection(
            **env, provider="udp" if f.proto == "udp" else "udplite", probe="connection", proto=f.proto, ip_ver=f.ip_ver,
            src=addr_str(f.orig[0]), sport=f.orig[1], dst=addr_str(f.resp[0]), dport=f.resp[1],
            start=f.first_ts / 1e9, end=f.last_ts / 1e9, duration=(f.last_ts - f.first_ts) / 1e9,
            packets_orig=f.packets[0], packets_resp=f.packets[1], bytes_orig=f.bytes[0], bytes_resp=f.bytes[1],
            wire_bytes_orig=f.wire[0], wire_bytes_resp=f.wire[1], conn_state=zeek.conn_state(f.z, "udp"),
            history=zeek.history(f.z), stream=f.stream, icmp_error=f.icmp_error, icmp_errors=f.icmp_errors or None,
            findings=udp_findings((f.packets[0], f.packets[1]), f.icmp_error, f.icmp_errors),
        )  # fmt: skip

    def alerts(self, thresholds: Thresholds | None = None) -> list[Alert]:
        def env(conv: Conv | None, start: float) -> dict[str, Any]:
            uuid = flow_uuid(self.host_id, self.boot_id, "tcp", conv.stream) if conv is not None else None
            e = self._env(int(start * 1e9), uuid)
            e["provider"] = "nettrail"
            e["probe"] = "pcap-rule"
            return e

        sink = AlertSink(env)
        evaluate(self.tcp.conversations, sink, self.endpoints, thresholds or Thresholds())
        return p7(self.tcp.conversations, sink, self.endpoints, self.findings_of)

"""ICMP and the other IP transports as connections, the way Zeek's conn.log has them.

TCP and UDP have their own analysis (tcp_analysis.py, capture_flows.py); every other
whole (unfragmented) IP packet becomes part of a flow here, as in Zeek 7:

* ICMP and ICMPv6: Zeek's "ports" are the message type (orig_p) and the counterpart
  type of a request or reply (resp_p: echo request 8 <-> echo reply 0, ...), or the
  message code for a one-way message (an unreachable: type 3, code 3), so a request and
  its reply are one flow and the echo identifier is not part of it
  (ICMP4_counterpart/ICMP6_counterpart of Zeek's ICMP analyzer). Bytes are Zeek's: each
  packet's IP payload less the 8-byte ICMP header.
* Any other IP protocol (GRE nettrail could not unwrap, ESP, SCTP, OSPF, ...): one flow
  per address pair and protocol, ports 0 (Zeek's unknown-transport analyzer), no payload
  bytes (Zeek leaves them unset: nettrail does not know where such a payload begins).

The sender of a flow's first packet is its originator; conn_state is always OTH (Zeek's
conn_state() for a transport that is neither TCP nor UDP) and there is no history. As for
UDP, a flow lasts the whole capture (Zeek ends one after a minute without packets).

Keep in sync with: analysis/flows/capture_flows.py (feeds it, lists the rows after UDP),
xo/zeek.py (proto and ip_proto of these rows), docs/analyze.md ("ICMP and other transports").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from translators.packet_layers import addr_str
from translators.packet_view import PacketView
from translators.records import Connection
from translators.records_fields import TRANSPORTS

# Request/reply type pairs (Zeek's ICMP4_counterpart and ICMP6_counterpart): echo,
# timestamp, information, router solicitation/advertisement, address mask; for ICMPv6
# echo, router and neighbour discovery, multicast listener query/report, node
# information, home agent address discovery.
ICMP4_COUNTERPART = {8: 0, 0: 8, 13: 14, 14: 13, 15: 16, 16: 15, 10: 9, 9: 10, 17: 18, 18: 17}
ICMP6_COUNTERPART = {128: 129, 129: 128, 133: 134, 134: 133, 135: 136, 136: 135, 130: 131, 131: 130,
                     139: 140, 140: 139, 144: 145, 145: 144}  # fmt: skip


@dataclass
class IpFlow:
    stream: int  # index among the flows of its proto, like udp.stream
    proto: str
    ip_ver: int
    orig: tuple[int, int]  # (address, port)
    resp: tuple[int, int]
    first_ts: int
    last_ts: int = 0
    packets: list[int] = field(default_factory=lambda: [0, 0])
    bytes: list[int] | None = field(default_factory=lambda: [0, 0])  # None: not known (unknown transports)
    wire: list[int] = field(default_factory=lambda: [0, 0])


class IpFlows:
    """The ICMP and other-transport flows of one capture, in order of their first packet."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[str, int, int, int, int], IpFlow] = {}
        self.flows: list[IpFlow] = []
        self.per_proto: dict[str, int] = {}

    def icmp(self, d: PacketView, i: int) -> None:
        """An ICMP or ICMPv6 packet (kind K_ICMP: its 8-byte header is in the frame)."""
        ver = d.value("ip_ver", i)
        icmp_type, code = divmod(d.value("sport", i), 256)  # packet_view.py: type << 8 | code
        dport = (ICMP4_COUNTERPART if ver == 4 else ICMP6_COUNTERPART).get(icmp_type, code)
        payload = d.value("payload", i)  # the IP payload less the 8-byte ICMP header, as Zeek counts
        self._add(d, i, "icmp" if ver == 4 else "icmp6", icmp_type, dport, payload)

    def other(self, d: PacketView, i: int) -> None:
        """A whole IP packet of a transport nettrail does not analyse (kind K_IP, not a fragment)."""
        self._add(d, i, TRANSPORTS[d.value("proto", i)], 0, 0, None)

    def _add(self, d: PacketView, i: int, proto: str, sport: int, dport: int, payload: int | None) -> None:
        src, dst = d.v6.get(i) or (d.value("src", i), d.value("dst", i))
        a, b = (src, sport), (dst, dport)
        lo, hi = (a, b) if a <= b else (b, a)
        key = (proto, lo[0], lo[1], hi[0], hi[1])
        ts = d.ts_at(i)
        flow = self.by_key.get(key)
        if flow is None:
            stream = self.per_proto.get(proto, 0)
            self.per_proto[proto] = stream + 1
            flow = IpFlow(stream, proto, d.value("ip_ver", i), a, b, ts, bytes=None if payload is None else [0, 0])
            self.by_key[key] = flow
            self.flows.append(flow)
        side = 0 if a == flow.orig else 1
        flow.packets[side] += 1
        flow.wire[side] += d.value("ip_len", i)
        if flow.bytes is not None and payload is not None:
            flow.bytes[side] += payload
        flow.last_ts = ts


def connection(f: IpFlow, env: dict[str, Any]) -> Connection:
    """The connection record of one flow; env is the record envelope (capture_flows._env)."""
    return Connection(
        **env, provider="ip", probe="connection", proto=f.proto, ip_ver=f.ip_ver,
        src=addr_str(f.orig[0]), sport=f.orig[1], dst=addr_str(f.resp[0]), dport=f.resp[1],
        start=f.first_ts / 1e9, end=f.last_ts / 1e9, duration=(f.last_ts - f.first_ts) / 1e9,
        packets_orig=f.packets[0], packets_resp=f.packets[1],
        bytes_orig=f.bytes[0] if f.bytes else None, bytes_resp=f.bytes[1] if f.bytes else None,
        wire_bytes_orig=f.wire[0], wire_bytes_resp=f.wire[1], conn_state="OTH", stream=f.stream, findings=[],
    )  # fmt: skip

"""Packet records from a decoded batch: the --packets view and the translator tests.

Turns packet i of a decoded batch (translators/packet_view.py: either decoder's) into
the IpPacket, UdpDatagram or TcpSegment record with the envelope the caller supplies.

Keep in sync with: translators/records_packets.py (the record fields),
translators/packet_view.py (the columns read).
"""

from __future__ import annotations

import struct
from typing import Any

from translators.packet_layers import K_MALFORMED, K_OTHER, K_TCP, K_UDP, PROTO_NAMES, addr_str, parse_tcp_options
from translators.packet_view import PacketView
from translators.records import IpPacket, Record, TcpSegment, UdpDatagram, tcp_flags_str


def ip_record(d: PacketView, i: int, env: dict[str, Any]) -> IpPacket:
    """The ip:::receive-style record of packet i (IPv4 or IPv6 header fields)."""
    buf = d.buf
    l3 = d.value("l3", i)
    ver = d.ip_ver[i]
    fields: dict[str, Any] = {}
    if ver == 4:
        tos = buf[l3 + 1]
        fo = d.value("frag_off", i)
        fields = dict(
            ttl=buf[l3 + 8], tos=tos, dscp=tos >> 2, ecn=tos & 3, ident=(buf[l3 + 4] << 8) | buf[l3 + 5],
            frag_flags=fo >> 13, frag_offset=(fo & 0x1FFF) * 8, checksum=(buf[l3 + 10] << 8) | buf[l3 + 11],
        )  # fmt: skip
    else:
        word = struct.unpack_from(">I", buf, l3)[0]
        tclass = (word >> 20) & 0xFF
        fields = dict(ttl=buf[l3 + 7], tos=tclass, dscp=tclass >> 2, ecn=tclass & 3, flow_label=word & 0xFFFFF)
    proto = d.value("proto", i)
    return IpPacket(
        **env,
        probe="receive",
        provider="ip",
        ip_ver=ver,
        src=addr_str(d.src[i]),
        dst=addr_str(d.dst[i]),
        protocol=proto,
        protocol_name=PROTO_NAMES.get(proto, str(proto)),
        header_length=d.value("hlen", i),
        length=d.ip_len[i],
        payload_length=d.ip_len[i] - d.value("hlen", i),
        is_fragment=d.fragment[i] > 0,
        frame=d.frame[i],
        wire_length=d.wire_len[i],
        **fields,
    )


def udp_record(d: PacketView, i: int, env: dict[str, Any]) -> UdpDatagram:
    buf = d.buf
    l4 = d.value("l4", i)
    return UdpDatagram(
        **env,
        probe="receive",
        provider="udp" if d.value("proto", i) == 17 else "udplite",
        ip_ver=d.ip_ver[i],
        src=addr_str(d.src[i]),
        sport=d.sport[i],
        dst=addr_str(d.dst[i]),
        dport=d.dport[i],
        length=(buf[l4 + 4] << 8) | buf[l4 + 5],
        payload_length=d.payload[i],
        checksum=(buf[l4 + 6] << 8) | buf[l4 + 7],
        frame=d.frame[i],
        wire_length=d.wire_len[i],
    )


def tcp_record(d: PacketView, i: int, env: dict[str, Any]) -> TcpSegment:
    """The header view of packet i; analysis fields are filled in by the caller."""
    buf = d.buf
    l4 = d.value("l4", i)
    thl = d.value("thl", i)
    end_cap = d.frame_end(i)
    opts = d.option_map.get(i) or parse_tcp_options(buf, l4 + 20, min(l4 + thl, end_cap))
    flags = d.flags[i]
    return TcpSegment(
        **env,
        probe="receive",
        provider="tcp",
        ip_ver=d.ip_ver[i],
        src=addr_str(d.src[i]),
        sport=d.sport[i],
        dst=addr_str(d.dst[i]),
        dport=d.dport[i],
        tcp_seq=d.seq[i],
        tcp_ack=d.ack[i],
        tcp_flags=flags & 0xFF,
        tcp_flags_str=tcp_flags_str(flags & 0xFF),
        tcp_offset=thl,
        tcp_window=d.window[i],
        tcp_checksum=(buf[l4 + 16] << 8) | buf[l4 + 17],
        tcp_urgent=(buf[l4 + 18] << 8) | buf[l4 + 19],
        tcp_payload_len=d.payload[i],
        opt_mss=opts.mss,
        opt_wscale=opts.wscale,
        opt_sack_permitted=opts.sack_permitted or None,
        opt_sack_blocks=[list(b) for b in opts.sack] if opts.sack else None,
        opt_ts_val=opts.ts_val,
        opt_ts_ecr=opts.ts_ecr,
        frame=d.frame[i],
        wire_length=d.wire_len[i],
    )


def packet_records(d: PacketView, i: int, env: dict[str, Any]) -> list[Record]:
    """IP record plus the transport record of packet i (empty for non-IP or malformed packets)."""
    kind = d.kind[i]
    if kind in (K_MALFORMED, K_OTHER):
        return []
    out: list[Record] = [ip_record(d, i, env)]
    if kind == K_TCP:
        out.append(tcp_record(d, i, env))
    elif kind == K_UDP:
        out.append(udp_record(d, i, env))
    return out

"""Packet records of the ip, udp and tcp providers: one IpPacket, UdpDatagram or TcpSegment per packet seen.

Filled by the packet decoder for captures (translators/packet.py) and by the ip/udp
translators for live events; a capture's frames keep their bytes here for pcap export.

Keep in sync with: ``../shared/docs/providers.md`` §2-4 (ip, udp, tcp send/receive),
translators/packet.py (the columns it turns into these fields), translators/ip.py and
translators/udp.py, docs/records/ (python -m translators.docgen).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from translators.records_envelope import FlowRecord
from translators.records_fields import Blob, Bool, Int, Str, doc


class IpPacket(FlowRecord, tag="ip_packet", kw_only=True):
    """ip:::send / ip:::receive: one IPv4 or IPv6 packet (providers.md 2)."""

    if_name: Annotated[Str, doc("interface name", brief=True)] = None
    if_index: Annotated[Int, doc("interface index")] = None
    if_local: Annotated[Bool, doc("the interface is loopback")] = None
    protocol: Annotated[Int, doc("next protocol number (IPv4 protocol / IPv6 next header)")] = None
    protocol_name: Annotated[Str, doc("next protocol name (TCP, UDP, ICMP, ...)", brief=True)] = None
    header_length: Annotated[Int, doc("IP header length (IPv6: with extension headers)", unit="bytes")] = None
    length: Annotated[Int, doc("IP total length", unit="bytes", brief=True)] = None
    payload_length: Annotated[Int, doc("IP payload length", unit="bytes")] = None
    ttl: Annotated[Int, doc("TTL (IPv4) or hop limit (IPv6)")] = None
    tos: Annotated[Int, doc("TOS byte / traffic class", hexa=True)] = None
    dscp: Annotated[Int, doc("DSCP code point")] = None
    ecn: Annotated[Int, doc("ECN bits (0 not-ECT, 1 ECT(1), 2 ECT(0), 3 CE)")] = None
    ident: Annotated[Int, doc("IPv4 identification")] = None
    frag_flags: Annotated[Int, doc("IPv4 flag bits: 4 reserved, 2 DF, 1 MF")] = None
    frag_offset: Annotated[Int, doc("fragment offset", unit="bytes")] = None
    is_fragment: Annotated[Bool, doc("the packet is a fragment (MF set or offset > 0, or an IPv6 fragment header)")] = None
    flow_label: Annotated[Int, doc("IPv6 flow label")] = None
    checksum: Annotated[Int, doc("header checksum (partial with TX offload)", hexa=True)] = None
    gso_segs: Annotated[Int, doc("segments this skb stands for (GSO/GRO); wire packets = gso_segs")] = None
    gso_size: Annotated[Int, doc("GSO segment size", unit="bytes")] = None
    frame: Annotated[Int, doc("frame number in the capture file (1-based)")] = None
    wire_length: Annotated[Int, doc("frame length on the wire", unit="bytes")] = None
    frame_bytes: Annotated[Blob, doc("captured frame bytes, kept for pcap export")] = None
    link_type: Annotated[Int, doc("pcap LINKTYPE of frame_bytes: 1 Ethernet, 101 raw IP, 113 Linux cooked, 276 Linux cooked v2")] = None


class UdpDatagram(FlowRecord, tag="udp_datagram", kw_only=True):
    """udp:::send / udp:::receive (and udplite): one datagram (providers.md 3)."""

    length: Annotated[Int, doc("UDP length, header + data (UDP-Lite: checksum coverage)", unit="bytes", brief=True)] = None
    payload_length: Annotated[Int, doc("datagram payload", unit="bytes")] = None
    checksum: Annotated[Int, doc("checksum (partial with TX offload)", hexa=True)] = None
    bytes: Annotated[Int, doc("bytes moved by the send/recv call (sock_send_length/sock_recv_length; before Linux 6.3 the system call's result)", unit="bytes")] = None
    error: Annotated[Int, doc("negative errno of a failed call (records before issue 16; a failed call is now a sock_event send-error/receive-error)")] = None
    if_name: Annotated[Str, doc("interface name")] = None
    gso_segs: Annotated[Int, doc("datagrams this skb stands for (UDP GSO)")] = None
    frame: Annotated[Int, doc("frame number in the capture file (1-based)")] = None
    wire_length: Annotated[Int, doc("frame length on the wire", unit="bytes")] = None
    frame_bytes: Annotated[Blob, doc("captured frame bytes, kept for pcap export")] = None
    link_type: Annotated[Int, doc("pcap LINKTYPE of frame_bytes: 1 Ethernet, 101 raw IP, 113 Linux cooked, 276 Linux cooked v2")] = None
    icmp_error: Annotated[Str, doc("ICMP error quoting this flow, e.g. port-unreachable")] = None


class TcpSegment(FlowRecord, tag="tcp_segment", kw_only=True):
    """tcp:::send / tcp:::receive: one TCP segment, with Wireshark-style analysis for captures."""

    tcp_seq: Annotated[Int, doc("sequence number (absolute)")] = None
    tcp_ack: Annotated[Int, doc("acknowledgment number (absolute)")] = None
    rel_seq: Annotated[Int, doc("sequence number relative to the ISN", brief=True)] = None
    rel_ack: Annotated[Int, doc("acknowledgment number relative to the peer's ISN")] = None
    tcp_flags: Annotated[Int, doc("flag byte: FIN 0x01 SYN 0x02 RST 0x04 PUSH 0x08 ACK 0x10 URG 0x20 ECE 0x40 CWR 0x80", hexa=True)] = None
    tcp_flags_str: Annotated[Str, doc("set flags, e.g. SYN|ACK", brief=True)] = None
    tcp_offset: Annotated[Int, doc("data offset (header length)", unit="bytes")] = None
    tcp_window: Annotated[Int, doc("raw (unscaled) window field")] = None
    window_scaled: Annotated[Int, doc("window after the handshake's scale is applied", unit="bytes", brief=True)] = None
    tcp_checksum: Annotated[Int, doc("checksum", hexa=True)] = None
    tcp_urgent: Annotated[Int, doc("urgent pointer")] = None
    tcp_payload_len: Annotated[Int, doc("payload bytes", unit="bytes", brief=True)] = None
    opt_mss: Annotated[Int, doc("MSS option", unit="bytes")] = None
    opt_wscale: Annotated[Int, doc("window scale option (shift)")] = None
    opt_sack_permitted: Annotated[Bool, doc("SACK-permitted option present")] = None
    opt_sack_blocks: Annotated[list[list[int]] | None, doc("SACK blocks [left, right) (absolute)")] = None
    opt_ts_val: Annotated[Int, doc("timestamp option TSval")] = None
    opt_ts_ecr: Annotated[Int, doc("timestamp option TSecr")] = None
    direction: Annotated[Str, doc("orig (from the connection's originator) or resp", choices=("orig", "resp"))] = None
    stream: Annotated[Int, doc("connection index in the capture (like tcp.stream)")] = None
    frame: Annotated[Int, doc("frame number in the capture file (1-based)")] = None
    wire_length: Annotated[Int, doc("frame length on the wire", unit="bytes")] = None
    frame_bytes: Annotated[Blob, doc("captured frame bytes, kept for pcap export")] = None
    link_type: Annotated[Int, doc("pcap LINKTYPE of frame_bytes: 1 Ethernet, 101 raw IP, 113 Linux cooked, 276 Linux cooked v2")] = None
    if_name: Annotated[Str, doc("interface name")] = None
    analysis: Annotated[list[str], doc("tcp.analysis flags set on this segment", brief=True)] = msgspec.field(default_factory=list)
    dup_ack_num: Annotated[Int, doc("duplicate ACK ordinal (Dup ACK N#M: M)")] = None
    dup_ack_frame: Annotated[Int, doc("frame of the original ACK this duplicates")] = None
    ack_rtt_us: Annotated[Int, doc("RTT to the segment this ACK acknowledges", unit="us")] = None
    bytes_in_flight: Annotated[Int, doc("unacknowledged bytes after this segment", unit="bytes")] = None

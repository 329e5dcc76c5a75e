"""translators.packet: exact bytes in (built with scapy), exact fields out (scapy is the reference decoder)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from scapy.all import (
    ICMP,
    IP,
    TCP,
    UDP,
    CookedLinux,
    CookedLinuxV2,
    Dot1Q,
    Ether,
    ICMPv6DestUnreach,
    IPOption_RR,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
    Packet,
    Raw,
    fragment,
)

from analysis.capture.pcap import CaptureReader
from tests import capwriter as cw
from translators.packet import K_ICMP, K_IP, K_MALFORMED, K_TCP, K_UDP, Decoded, addr_str, decode_batch, packet_records
from translators.records import IpPacket, TcpSegment, UdpDatagram

ENV = {"host_id": "test.pcap", "boot_id": "0123456789abcdef", "seq": 1, "ts_ns": 1, "ts_wall": 1e-9}
TCP_OPTS = [
    ("MSS", 1460),
    ("NOP", None),
    ("WScale", 7),
    ("SAckOK", b""),
    ("Timestamp", (123456, 654321)),
    ("SAck", (1000, 2000, 3000, 4000)),
]


def tcp_v4() -> Packet:
    return IP(src="192.0.2.1", dst="198.51.100.7", ttl=61, tos=0xB9, id=4242, flags="DF", options=[IPOption_RR(routers=["1.1.1.1"])]) / TCP(
        sport=40000, dport=443, seq=0xFFFFFF00, ack=77, flags="PA", window=501, options=TCP_OPTS[:1] + TCP_OPTS[4:], urgptr=0
    ) / Raw(b"hello world")  # fmt: skip


def tcp_v6() -> Packet:
    return IPv6(src="2001:db8::1", dst="2001:db8::2", tc=0x28, fl=0xBEEF, hlim=9) / TCP(
        sport=5, dport=6, flags="S", options=TCP_OPTS[:5]
    )


def decode(tmp_path: Path, frames: list[bytes], linktype: int) -> Decoded:
    path = tmp_path / "p.pcap"
    path.write_bytes(cw.pcap([cw.Pkt(f, 1_000_000_000 + i) for i, f in enumerate(frames)], linktype=linktype))
    with CaptureReader(str(path)) as r:
        batches = list(r.batches())
    assert len(batches) == 1
    return decode_batch(batches[0], want_options=True)


def ip_of(pkt: Packet) -> Packet:
    return pkt[IP] if IP in pkt else pkt[IPv6]


def expect_tcp(d: Decoded, i: int, ref: Packet) -> None:
    """Every decoded TCP field equals scapy's reading of the same bytes."""
    ip, tcp = ip_of(ref), ref[TCP]
    assert d.kind[i] == K_TCP
    assert (addr_str(d.src[i]), addr_str(d.dst[i])) == (ip.src, ip.dst)
    assert (d.sport[i], d.dport[i], d.seq[i], d.ack[i]) == (tcp.sport, tcp.dport, tcp.seq, tcp.ack)
    assert (d.flags[i], d.window[i]) == (int(tcp.flags), tcp.window)
    assert d.payload[i] == len(bytes(tcp.payload))
    seg = packet_records(d, i, ENV)[1]
    assert isinstance(seg, TcpSegment)
    opts = dict(tcp.options)
    assert seg.tcp_offset == tcp.dataofs * 4
    assert seg.opt_mss == opts.get("MSS")
    assert seg.opt_wscale == opts.get("WScale")
    assert seg.opt_sack_permitted == ("SAckOK" in opts or None)
    assert (seg.opt_ts_val, seg.opt_ts_ecr) == (opts["Timestamp"] if "Timestamp" in opts else (None, None))
    sack = opts.get("SAck")
    assert seg.opt_sack_blocks == ([list(sack[j : j + 2]) for j in range(0, len(sack), 2)] if sack else None)
    assert (seg.tcp_checksum, seg.tcp_urgent) == (tcp.chksum, tcp.urgptr)


def rebuilt(frames: list[Packet]) -> list[Packet]:
    """Let scapy fill checksums and lengths, then read them back as the reference."""
    return [f.__class__(bytes(f)) for f in frames]


@pytest.mark.parametrize(
    ("linktype", "wrap"),
    [
        (1, lambda p: Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / p),
        (1, lambda p: Ether() / Dot1Q(vlan=10) / p),
        (1, lambda p: Ether() / Dot1Q(vlan=10, type=0x8100) / Dot1Q(vlan=20) / p),
        (113, lambda p: CookedLinux(pkttype=4, lladdrlen=6) / p),
        (276, lambda p: CookedLinuxV2(ifindex=3) / p),
        (101, lambda p: p),
    ],
    ids=["ethernet", "vlan", "qinq", "sll", "sll2", "raw"],
)
def test_tcp_over_every_link_type_decodes_like_scapy(tmp_path: Path, linktype: int, wrap: Any) -> None:
    frames = rebuilt([wrap(tcp_v4()), wrap(tcp_v6())])
    d = decode(tmp_path, [bytes(f) for f in frames], linktype)
    for i, f in enumerate(frames):
        expect_tcp(d, i, f)


@pytest.mark.parametrize(("linktype", "family", "order"), [(0, 2, "<"), (0, 24, "<"), (0, 2, ">"), (108, 24, ">")])
def test_bsd_loopback_uses_the_ip_version_not_the_host_order_family(
    tmp_path: Path, linktype: int, family: int, order: str
) -> None:
    inner = rebuilt([tcp_v4() if family == 2 else tcp_v6()])[0]
    d = decode(tmp_path, [struct.pack(order + "I", family) + bytes(inner)], linktype)
    expect_tcp(d, 0, inner)


def test_raw_ipv4_and_ipv6_link_types_check_the_version(tmp_path: Path) -> None:
    v4, v6 = rebuilt([tcp_v4(), tcp_v6()])
    d = decode(tmp_path, [bytes(v4), bytes(v6)], 228)
    expect_tcp(d, 0, v4)
    assert d.kind[1] not in (K_TCP, K_MALFORMED)  # an IPv6 packet on LINKTYPE_IPV4 is not IP here
    d = decode(tmp_path, [bytes(v6)], 229)
    expect_tcp(d, 0, v6)


def test_ip_record_fields_match_scapy(tmp_path: Path) -> None:
    v4, v6 = rebuilt([tcp_v4(), tcp_v6()])
    d = decode(tmp_path, [bytes(v4), bytes(v6)], 101)
    r4, r6 = packet_records(d, 0, ENV)[0], packet_records(d, 1, ENV)[0]
    assert isinstance(r4, IpPacket) and isinstance(r6, IpPacket)
    assert (r4.ip_ver, r4.ttl, r4.tos, r4.dscp, r4.ecn, r4.ident, r4.frag_flags, r4.checksum) == (
        4,
        61,
        0xB9,
        0xB9 >> 2,
        1,
        4242,
        2,
        v4.chksum,
    )
    assert (r4.header_length, r4.length, r4.protocol_name, r4.is_fragment) == (v4.ihl * 4, v4.len, "TCP", False)
    assert r4.header_length == 28  # the record-route option is walked over
    assert (r6.ip_ver, r6.ttl, r6.tos, r6.flow_label, r6.length, r6.header_length) == (
        6,
        9,
        0x28,
        0xBEEF,
        40 + v6.plen,
        40,
    )


def test_ipv6_extension_headers_are_walked_to_the_transport(tmp_path: Path) -> None:
    pkt = rebuilt(
        [
            IPv6(src="2001:db8::a", dst="2001:db8::b")
            / IPv6ExtHdrHopByHop()
            / IPv6ExtHdrRouting(addresses=["2001:db8::c"])
            / IPv6ExtHdrDestOpt()
            / UDP(sport=53, dport=5353)
            / Raw(b"q" * 17)
        ]
    )[0]
    d = decode(tmp_path, [bytes(pkt)], 229)
    assert d.kind[0] == K_UDP
    udp = packet_records(d, 0, ENV)[1]
    assert isinstance(udp, UdpDatagram)
    assert (udp.sport, udp.dport, udp.length, udp.payload_length, udp.checksum) == (
        53,
        5353,
        pkt[UDP].len,
        17,
        pkt[UDP].chksum,
    )
    ip = packet_records(d, 0, ENV)[0]
    assert isinstance(ip, IpPacket)
    assert ip.header_length == len(bytes(pkt)) - len(bytes(pkt[UDP]))


def test_fragments_are_counted_and_not_taken_for_transport_headers(tmp_path: Path) -> None:
    frags = fragment(IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1, dport=2) / Raw(b"z" * 3000), fragsize=1000)
    v6frag = (
        IPv6(src="2001:db8::1", dst="2001:db8::2")
        / IPv6ExtHdrFragment(offset=0, m=1, id=7)
        / UDP(sport=1, dport=2)
        / Raw(b"y" * 64)
    )
    d = decode(tmp_path, [bytes(f) for f in frags] + [bytes(v6frag)], 101)
    assert len(frags) == 4
    assert d.kind == [K_IP] * 5
    assert d.fragment == [1, 2, 2, 2, 1]
    rec = packet_records(d, 1, ENV)[0]
    assert isinstance(rec, IpPacket) and rec.is_fragment and rec.frag_offset == frags[1].frag * 8


def test_icmp_unreachable_quotes_the_flow_it_refers_to(tmp_path: Path) -> None:
    sent = IP(src="10.1.1.1", dst="10.2.2.2") / UDP(sport=33333, dport=7) / Raw(b"ping")
    err = IP(src="10.2.2.2", dst="10.1.1.1") / ICMP(type=3, code=3) / bytes(sent)[:28]
    sent6 = IPv6(src="2001:db8::1", dst="2001:db8::2") / TCP(sport=4000, dport=22)
    err6 = IPv6(src="2001:db8::2", dst="2001:db8::1") / ICMPv6DestUnreach(code=1) / bytes(sent6)
    d = decode(tmp_path, [bytes(err)], 101)
    d6 = decode(tmp_path, [bytes(err6)], 101)
    q, q6 = d.icmp[0], d6.icmp[0]
    assert d.kind[0] == K_ICMP and d6.kind[0] == K_ICMP
    assert (q.error, addr_str(q.src), q.sport, addr_str(q.dst), q.dport, q.proto) == (
        "port-unreachable",
        "10.1.1.1",
        33333,
        "10.2.2.2",
        7,
        17,
    )
    assert (q6.error, addr_str(q6.src), q6.sport, q6.dport, q6.proto) == (
        "admin-prohibited",
        "2001:db8::1",
        4000,
        22,
        6,
    )


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda b: b[: 14 + 10], "IPv4 header cut short"),
        (lambda b: b[:14] + bytes([0x43]) + b[15:], "IPv4 header length below 20"),
        (lambda b: b[:16] + struct.pack(">H", 9000) + b[18:], "IPv4 total length runs past the end of the frame"),
        (lambda b: b[: 14 + 28 + 12] + bytes([0x30]) + b[14 + 28 + 13 :], "TCP header length below 20"),
        (
            lambda b: b[: 14 + 28 + 12] + bytes([0xF0]) + b[14 + 28 + 13 :],
            "TCP header length past the end of the IP payload",
        ),
        (lambda b: (b[:16] + struct.pack(">H", 38) + b[18:])[: 14 + 38], "TCP header cut short"),
    ],
)
def test_impossible_headers_are_malformed_with_a_reason(tmp_path: Path, mutate: Any, reason: str) -> None:
    good = bytes(Ether() / IP(options=[IPOption_RR(routers=["1.1.1.1"])]) / TCP() / Raw(b"hi"))
    d = decode(tmp_path, [mutate(good), good], 1)
    assert d.kind == [K_MALFORMED, K_TCP]
    assert d.reasons == {0: reason}


def test_a_snaplen_cut_frame_keeps_its_ip_lengths(tmp_path: Path) -> None:
    full = rebuilt(
        [
            Ether()
            / IP(src="1.1.1.1", dst="2.2.2.2")
            / TCP(sport=1, dport=2, options=[("Timestamp", (1, 2))])
            / Raw(b"a" * 1000)
        ]
    )[0]
    raw = bytes(full)
    path = tmp_path / "cut.pcap"
    path.write_bytes(cw.pcap([cw.Pkt(raw[:80], 1, orig_len=len(raw))]))
    with CaptureReader(str(path)) as r:
        d = decode_batch(next(r.batches()), want_options=True)
    assert d.kind == [K_TCP] and d.payload == [1000] and d.ip_len == [full[IP].len]

"""The plain-Python decoder of small captures agrees with the numpy decoder, field by field.

`nettrail analyze` decodes a small capture with translators/packet_rows.py (no numpy,
for start-up time, issue 17 item 7) and a big one with translators/packet.py. Both run
here over the same captures -- every link layer and tunnel of tests/test_linklayers.py
(IPv4 and IPv6), the unreadable ones, the headers of tests/test_translator_packet.py
(options, fragments, IPv6 extension headers, ICMP errors, snaplen cuts, each kind of
malformed header), tests/capture_mix.py, a pcapng of two interfaces, and random damage
to all of them -- and every per-packet value, every packet record and the whole
analysis (connections, alerts, totals, with and without --packets) must be equal.
Keep in sync with: translators/packet_rows.py, translators/packet.py, analysis/capture/pcap.py (rows).
"""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.all import (
    ICMP,
    IP,
    TCP,
    UDP,
    Ether,
    ICMPv6DestUnreach,
    IPOption_RR,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
    Raw,
    fragment,
)

from analysis.capture.pcap import CaptureError, CaptureReader
from analysis.flows.capture_flows import CapturePipeline
from tests import capture_mix
from tests import capwriter as cw
from tests.test_analyze_fuzz import FRAMES
from tests.test_linklayers import MACS, WRAPS, conversation
from tests.test_translator_packet import TCP_OPTS
from translators.packet import decode_batch
from translators.packet_layers import K_MALFORMED, K_OTHER, K_TCP, K_UDP
from translators.packet_records import packet_records
from translators.packet_rows import decode_rows
from translators.packet_view import PacketView

ENV = {"host_id": "rows.pcap", "boot_id": "0123456789abcdef", "seq": 1, "ts_ns": 1, "ts_wall": 1e-9}
T0 = 1_700_000_000_000_000_000


def linklayer_captures() -> dict[str, bytes]:
    """Each link layer and tunnel of test_linklayers around the IPv4 and the IPv6 conversation."""
    out = {}
    for name, (linktype, wrap) in WRAPS.items():
        for v6 in (False, True):
            frames = [wrap(p) for p in conversation(v6=v6)]
            out[f"{name}-v{6 if v6 else 4}"] = cw.pcap(
                [cw.Pkt(f, T0 + i * 1000) for i, f in enumerate(frames)], linktype
            )
    ip = conversation()[0]
    odd = [
        (1, bytes(Ether(**MACS, type=0x88E7) / Raw(b"\x00" * 18) / ip)),  # PBB carrying an 802.3 length
        (1, bytes(Ether(**MACS, type=0x8926) / Raw(b"\x00" * 6) / ip)),  # VN-Tag carrying an 802.3 length
        (1, WRAPS["pbb"][1](ip)[:31]),  # cut before the customer ethertype
        (1, WRAPS["fabricpath"][1](ip)[:29]),  # cut before the classic frame's ethertype
        (1, bytes(Ether(**MACS) / Raw(b"\x08"))),  # too short for its ethertype
        (105, bytes.fromhex("0841") + b"\x00" * 60),  # protected 802.11 data
        (10, b"\x00" * 13 + bytes(ip)),  # FDDI
        (229, bytes(ip)),  # IPv6 link type with an IPv4 packet
        (0, struct.pack("<I", 2) + bytes(ip)),
    ]
    for j, (linktype, frame) in enumerate(odd):
        out[f"odd-{j}"] = cw.pcap([cw.Pkt(frame, T0)], linktype)
    return out


def header_frames() -> list[bytes]:
    """Raw-IP frames (link type 101) of test_translator_packet's kinds, good and malformed."""
    good = IP(src="192.0.2.1", dst="198.51.100.7", options=[IPOption_RR(routers=["1.1.1.1"])]) / TCP(
        sport=40000, dport=443, flags="PA", options=TCP_OPTS
    ) / Raw(b"hello")  # fmt: skip
    sent = IP(src="10.1.1.1", dst="10.2.2.2") / UDP(sport=33333, dport=7) / Raw(b"ping")
    sent6 = IPv6(src="2001:db8::1", dst="2001:db8::2") / TCP(sport=4000, dport=22)
    frames = [
        bytes(good),
        bytes(IPv6(src="2001:db8::1", dst="2001:db8::2") / TCP(sport=5, dport=6, flags="S", options=TCP_OPTS[:5])),
        bytes(IP(src="1.1.1.1", dst="2.2.2.2") / TCP(options=[("NOP", None), ("NOP", None), ("Timestamp", (1, 2))]) / Raw(b"t")),
        bytes(IP(src="10.2.2.2", dst="10.1.1.1") / ICMP(type=3, code=3) / bytes(sent)[:28]),
        bytes(IP(src="10.2.2.2", dst="10.1.1.1") / ICMP(type=8)),
        bytes(IPv6(src="2001:db8::2", dst="2001:db8::1") / ICMPv6DestUnreach(code=1) / bytes(sent6)),
        bytes(IPv6(src="2001:db8::1", dst="2001:db8::2") / IPv6ExtHdrHopByHop() / IPv6ExtHdrRouting() / IPv6ExtHdrDestOpt() / UDP(sport=1, dport=2) / Raw(b"x")),
        bytes(IPv6(src="2001:db8::1", dst="2001:db8::2") / IPv6ExtHdrFragment(offset=0, m=1, id=7) / UDP(sport=1, dport=2) / Raw(b"y" * 64)),
        bytes(IPv6(src="2001:db8::1", dst="2001:db8::2", nh=0) / Raw(b"\x11\x09")),  # a chain cut short
        bytes(IP(src="10.0.0.1", dst="10.0.0.2", proto=136) / UDP(sport=9, dport=10) / Raw(b"lite")),
        bytes(IP(src="10.0.0.1", dst="10.0.0.2", proto=132) / Raw(b"sctp")),
        *(bytes(f) for f in fragment(IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1, dport=2) / Raw(b"z" * 3000), fragsize=1000)),
    ]  # fmt: skip
    raw = bytes(good)
    frames += [  # each malformed reason of test_translator_packet, on the raw IP frame
        raw[:10], bytes([0x43]) + raw[1:], bytes([0x65]) + raw[1:], raw[:2] + struct.pack(">H", 9000) + raw[4:],
        raw[:2] + struct.pack(">H", 10) + raw[4:], raw[:24], raw[:28 + 12] + bytes([0x30]) + raw[28 + 13:],
        raw[:28 + 12] + bytes([0xF0]) + raw[28 + 13:], (raw[:2] + struct.pack(">H", 38) + raw[4:])[:38],
        bytes(IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1, dport=2, len=3) / Raw(b"u")),
        bytes(IP(src="10.0.0.1", dst="10.0.0.2", proto=1) / Raw(b"\x03")), bytes(IPv6()/Raw(b"abc"))[:30],
    ]  # fmt: skip
    return frames


def header_captures() -> dict[str, bytes]:
    frames = header_frames()
    cut = bytes(Ether() / IP(src="1.1.1.1", dst="2.2.2.2") / TCP(options=[("Timestamp", (1, 2))]) / Raw(b"a" * 1000))
    return {
        "headers": cw.pcap([cw.Pkt(f, T0 + i) for i, f in enumerate(frames)], 101),
        "headers-be-nano": cw.pcap([cw.Pkt(f, T0 + i) for i, f in enumerate(frames)], 101, order=">", nano=True),
        "snaplen-cut": cw.pcap([cw.Pkt(cut[:80], T0, orig_len=len(cut)), cw.Pkt(cut[:60], T0 + 1, orig_len=len(cut))]),
        "pcapng-two-interfaces": cw.pcapng(
            [
                (
                    "<",
                    [(1, 9), (101, 6)],
                    [cw.Pkt(f if i % 2 == 0 else f[14:], t, iface=i % 2) for i, (t, f) in enumerate(FRAMES)],
                )
            ]
        ),  # fmt: skip
    }


def decode_both(path: Path, chunk: int, want_options: bool) -> tuple[list[PacketView], list[PacketView]]:
    """Each decoder's batches; a file the reader gives up on must fail the same way for both."""
    errors = []
    with CaptureReader(str(path), chunk_size=chunk) as r:
        try:
            numpy_side: list[PacketView] = [decode_batch(b, want_options=want_options) for b in r.batches()]
        except CaptureError as exc:
            errors.append(str(exc))
    with CaptureReader(str(path), chunk_size=chunk) as r:
        try:
            rows_side: list[PacketView] = [decode_rows(b, want_options=want_options) for b in r.rows()]
        except CaptureError as exc:
            errors.append(str(exc))
    if errors:
        assert len(errors) == 2 and errors[0] == errors[1]
        return [], []
    return numpy_side, rows_side


def builtins(rec: Any) -> Any:
    return msgspec.to_builtins(rec)


def assert_same_packets(a: PacketView, b: PacketView) -> None:
    """Every value the analysis and the records read, packet by packet."""
    assert (a.n, a.first_frame, bytes(a.buf)) == (b.n, b.first_frame, bytes(b.buf))
    for i in range(a.n):
        k = a.kind[i]
        what = (i, k, a.reasons.get(i))
        assert (k, b.reasons.get(i), b.ip_ver[i]) == (b.kind[i], a.reasons.get(i), a.ip_ver[i]), what
        assert (a.frame[i], a.ts_ns[i], a.wire_len[i], a.frame_end(i), a.file_offset(i)) == (
            b.frame[i], b.ts_ns[i], b.wire_len[i], b.frame_end(i), b.file_offset(i),
        ), what  # fmt: skip
        if k in (K_MALFORMED, K_OTHER):
            continue
        fields = ["fragment", "ip_len", "proto", "hlen", "l3"]
        if k in (K_TCP, K_UDP):
            fields += ["sport", "dport", "payload"]
        if k == K_TCP:
            fields += ["seq", "ack", "flags", "window", "thl"]
        assert {f: a.value(f, i) for f in fields} == {f: b.value(f, i) for f in fields}, what
        assert (a.src[i], a.dst[i], a.option_map.get(i), a.icmp.get(i)) == (
            b.src[i], b.dst[i], b.option_map.get(i), b.icmp.get(i),
        ), what  # fmt: skip
        assert [builtins(r) for r in packet_records(a, i, ENV)] == [builtins(r) for r in packet_records(b, i, ENV)]
    assert (a.caplen_total(), a.wirelen_total(), a.count_fragments(), a.not_kind(K_TCP)) == (
        b.caplen_total(), b.wirelen_total(), b.count_fragments(), b.not_kind(K_TCP),
    )  # fmt: skip
    assert [a.count_kind(k) for k in (-1, 0, 1, 6, 17, 58)] == [b.count_kind(k) for k in (-1, 0, 1, 6, 17, 58)]
    assert a.tcp_columns() == b.tcp_columns()


def analysis(views: list[PacketView], packets: bool) -> tuple[list[Any], dict[str, Any]]:
    pipe = CapturePipeline("rows.pcap", "0123456789abcdef", packets=packets)
    out = [builtins(r) for d in views for r in pipe.feed(d)]
    out += [builtins(c) for c in pipe.connections()] + [builtins(a) for a in pipe.alerts()]
    return out, dataclasses.asdict(pipe.totals)


def compare(path: Path, chunk: int = 1 << 20) -> int:
    """Both decoders over one file, alone and through the whole analysis; -> packets compared."""
    for want_options in (False, True):
        numpy_side, rows_side = decode_both(path, chunk, want_options)
        assert len(numpy_side) == len(rows_side)
        for a, b in zip(numpy_side, rows_side, strict=True):
            assert_same_packets(a, b)
        assert analysis(numpy_side, want_options) == analysis(rows_side, want_options)
    return sum(d.n for d in numpy_side)


CAPTURES = {**linklayer_captures(), **header_captures()}


@pytest.mark.parametrize("name", CAPTURES)
def test_both_decoders_give_the_same_values_records_and_analysis(tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.pcap"
    path.write_bytes(CAPTURES[name])
    assert compare(path) > 0


def test_they_agree_on_the_mixed_capture_read_in_small_chunks(tmp_path: Path) -> None:
    path = capture_mix.build(tmp_path / "mix.pcap")
    assert compare(path) == 23
    assert compare(path, chunk=300) == 23  # batches of one or two packets, carried over chunk ends


def test_the_reader_gives_rows_the_same_columns_as_batches(tmp_path: Path) -> None:
    path = tmp_path / "ng.pcapng"
    path.write_bytes(CAPTURES["pcapng-two-interfaces"])
    with CaptureReader(str(path), chunk_size=256) as r:
        batches = list(r.batches())
    with CaptureReader(str(path), chunk_size=256) as r:
        rows = list(r.rows())
    names = ("data_off", "caplen", "wirelen", "ts_ns", "linktype", "iface", "file_off")
    assert [[getattr(b, f).tolist() for f in names] + [b.first_frame] for b in batches] == [
        [getattr(b, f) for f in names] + [b.first_frame] for b in rows
    ]
    assert sum(len(b) for b in rows) == len(FRAMES)


MUTABLE = [CAPTURES["headers"], CAPTURES["vxlan-v4"], CAPTURES["pppoe-qinq-v6"], CAPTURES["wifi-qos-4addr-v4"],
           CAPTURES["pcapng-two-interfaces"], CAPTURES["gre-in-vlan-mpls-v4"], CAPTURES["nflog-v6"]]  # fmt: skip


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.sampled_from(range(len(MUTABLE))),
    edits=st.lists(st.tuples(st.integers(min_value=24, max_value=4000), st.integers(0, 255)), max_size=12),
    cut=st.integers(min_value=0, max_value=64),
)
def test_they_agree_on_damaged_captures(tmp_path: Path, seed: int, edits: list[tuple[int, int]], cut: int) -> None:
    data = bytearray(MUTABLE[seed])
    for pos, value in edits:  # bytes past the file header: packet bytes and record headers alike
        if pos < len(data):
            data[pos] = value
    path = tmp_path / "damaged.pcap"
    path.write_bytes(bytes(data[: len(data) - cut]))
    try:
        CaptureReader(str(path)).close()
    except CaptureError:  # a header damaged beyond reading is the reader's test, not this one
        return
    compare(path, chunk=512)

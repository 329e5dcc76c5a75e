"""analysis.capture.pcap: every container variant yields the same packets; damage is counted, not fatal."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import pytest

from analysis.capture.pcap import CaptureError, CaptureReader
from tests import capwriter as cw

T0 = 1_700_000_000_123_456_789
PACKETS = [cw.Pkt(bytes([i]) * (60 + i), T0 + i * 1_000_123) for i in range(40)]


def read_all(path: Path, chunk: int = 1 << 20) -> tuple[list[tuple[bytes, int, int, int]], CaptureReader]:
    """-> [(data, ts_ns, wirelen, linktype)] and the (closed) reader."""
    out = []
    with CaptureReader(str(path), chunk_size=chunk) as r:
        for b in r.batches():
            for i in range(len(b)):
                start = int(b.data_off[i])
                out.append(
                    (b.buf[start : start + int(b.caplen[i])], int(b.ts_ns[i]), int(b.wirelen[i]), int(b.linktype[i]))
                )
    return out, r


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("nano", [False, True])
def test_it_reads_classic_pcap_in_both_byte_orders_and_resolutions(tmp_path: Path, order: str, nano: bool) -> None:
    path = write(tmp_path, "a.pcap", cw.pcap(PACKETS, linktype=1, order=order, nano=nano))
    got, r = read_all(path)
    assert r.format == "pcap" and r.damage.count == 0
    assert [g[0] for g in got] == [p.data for p in PACKETS]
    # microsecond files lose the nanoseconds, nothing else
    assert [g[1] for g in got] == [p.ts_ns if nano else p.ts_ns // 1000 * 1000 for p in PACKETS]
    assert {g[3] for g in got} == {1}


@pytest.mark.parametrize("chunk", [64, 200, 4096])
def test_records_spanning_chunk_boundaries_are_reassembled(tmp_path: Path, chunk: int) -> None:
    path = write(tmp_path, "a.pcap", cw.pcap(PACKETS))
    got, r = read_all(path, chunk=chunk)
    assert [g[0] for g in got] == [p.data for p in PACKETS] and r.damage.count == 0


def test_it_reads_gzip_compressed_captures(tmp_path: Path) -> None:
    path = write(tmp_path, "a.pcap.gz", gzip.compress(cw.pcap(PACKETS, nano=True)))
    got, r = read_all(path, chunk=500)
    assert r.compressed and [g[0] for g in got] == [p.data for p in PACKETS]
    assert [g[1] for g in got] == [p.ts_ns for p in PACKETS]


@pytest.mark.parametrize("order", ["<", ">"])
def test_pcapng_keeps_each_interfaces_link_type_and_resolution(tmp_path: Path, order: str) -> None:
    pkts = [cw.Pkt(p.data, p.ts_ns, iface=i % 2) for i, p in enumerate(PACKETS)]
    data = cw.pcapng([(order, [(1, None), (101, 9)], pkts)])
    got, r = read_all(write(tmp_path, "a.pcapng", data), chunk=300)
    assert r.format == "pcapng" and r.damage.count == 0
    assert [g[0] for g in got] == [p.data for p in pkts]
    assert [g[3] for g in got] == [1 if p.iface == 0 else 101 for p in pkts]
    # interface 0 has the default microsecond resolution, interface 1 nanoseconds
    assert [g[1] for g in got] == [p.ts_ns // 1000 * 1000 if p.iface == 0 else p.ts_ns for p in pkts]
    assert [i.linktype for i in r.interfaces] == [1, 101]


def test_pcapng_sections_may_switch_byte_order(tmp_path: Path) -> None:
    first, second = PACKETS[:10], PACKETS[10:20]
    data = cw.pcapng([("<", [(1, 6)], first), (">", [(228, 9)], second)])
    got, r = read_all(write(tmp_path, "a.pcapng", data))
    assert [g[3] for g in got] == [1] * 10 + [228] * 10
    assert [g[0] for g in got] == [p.data for p in first + second]


def test_pcapng_binary_timestamp_resolution_and_simple_packet_blocks(tmp_path: Path) -> None:
    ticks = 5 * 1024 + 512  # 5.5 s in 1/1024 s ticks (if_tsresol 0x8a)
    epb = cw._block("<", 6, struct.pack("<IIIII", 0, 0, ticks, 4, 4) + b"abcd")
    data = cw.shb() + cw.idb(1, tsresol=0x8A) + epb + cw.spb(cw.Pkt(b"xyz!", 0, orig_len=10))
    got, r = read_all(write(tmp_path, "a.pcapng", data))
    assert got == [(b"abcd", 5_500_000_000, 4, 1), (b"xyz!", 5_500_000_000, 10, 1)]


def test_a_bad_magic_number_is_an_error_naming_offset_zero(tmp_path: Path) -> None:
    path = write(tmp_path, "x.pcap", b"GARBAGE!" * 10)
    with pytest.raises(CaptureError) as exc:
        CaptureReader(str(path))
    assert str(exc.value) == f"{path}: byte offset 0: bad magic number 0x47415242: not a pcap or pcapng file"


@pytest.mark.parametrize("data", [b"", b"\xd4\xc3", cw.pcap([])[:20]])
def test_a_file_too_short_for_its_header_is_an_error(tmp_path: Path, data: bytes) -> None:
    with pytest.raises(CaptureError):
        CaptureReader(str(write(tmp_path, "x.pcap", data)))


def test_a_truncated_last_record_is_counted_with_its_offset(tmp_path: Path) -> None:
    data = cw.pcap(PACKETS[:3])
    got, r = read_all(write(tmp_path, "t.pcap", data[:-10]))
    assert len(got) == 2
    last = 24 + (16 + len(PACKETS[0].data)) + (16 + len(PACKETS[1].data))
    assert r.damage.count == 1
    assert r.damage.first == [(last, f"truncated record: {16 + len(PACKETS[2].data) - 10} bytes left at end of file")]


def test_an_impossible_record_length_stops_reading_but_keeps_what_came_before(tmp_path: Path) -> None:
    good = cw.pcap(PACKETS[:2])
    bad = struct.pack("<IIII", 1, 0, 50_000_000, 50_000_000) + b"x" * 100
    got, r = read_all(write(tmp_path, "t.pcap", good + bad + cw.pcap(PACKETS[:2])[24:]))
    assert len(got) == 2 and r.damage.count == 1
    assert r.damage.first[0][0] == len(good)
    assert "record length 50000000" in r.damage.first[0][1]


def test_a_pcapng_block_whose_trailer_disagrees_is_damage(tmp_path: Path) -> None:
    block = bytearray(cw.epb(PACKETS[1]))
    block[-4:] = struct.pack("<I", 999)
    data = cw.shb() + cw.idb(1) + cw.epb(PACKETS[0]) + bytes(block) + cw.epb(PACKETS[2])
    got, r = read_all(write(tmp_path, "t.pcapng", data))
    assert [g[0] for g in got] == [PACKETS[0].data]
    assert r.damage.count == 1 and "does not match its trailer 999" in r.damage.first[0][1]


def test_a_pcapng_packet_naming_an_unknown_interface_is_skipped(tmp_path: Path) -> None:
    data = cw.shb() + cw.idb(1) + cw.epb(cw.Pkt(b"a" * 20, T0, iface=3)) + cw.epb(PACKETS[0])
    got, r = read_all(write(tmp_path, "t.pcapng", data))
    assert [g[0] for g in got] == [PACKETS[0].data]
    assert r.damage.count == 1 and "interface 3" in r.damage.first[0][1]


def test_a_captured_length_past_its_block_is_skipped(tmp_path: Path) -> None:
    body = struct.pack("<IIIII", 0, 0, 0, 500, 500) + b"q" * 8
    data = cw.shb() + cw.idb(1) + cw._block("<", 6, body) + cw.epb(PACKETS[0])
    got, r = read_all(write(tmp_path, "t.pcapng", data))
    assert [g[0] for g in got] == [PACKETS[0].data] and r.damage.count == 1


def test_a_cut_gzip_stream_keeps_the_packets_before_the_cut(tmp_path: Path) -> None:
    data = gzip.compress(cw.pcap(PACKETS * 50))
    got, r = read_all(write(tmp_path, "cut.pcap.gz", data[: len(data) // 2]), chunk=4096)
    assert 0 < len(got) < len(PACKETS) * 50
    assert [g[0] for g in got] == [p.data for p in (PACKETS * 50)[: len(got)]]
    assert any("compressed data ends" in reason for _off, reason in r.damage.first)

"""pcap export (analysis/export/pcap.py): real loopback traffic in, tshark-readable pcap out."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP
from scapy.utils import rdpcap

from analysis.export.atomic import atomic_output
from analysis.export.pcap import PcapExportError, capture_order, write_pcap
from tests.loopback_capture import capture_connections, need_tools, tshark_conversations, tshark_count
from translators.records import IpPacket, TcpSegment, flow_uuid


def reference_records(path: Path) -> list[TcpSegment]:
    """TcpSegment records with bytes, decoded by scapy (the reference decoder)."""
    out = []
    streams: dict[frozenset[tuple[str, int]], int] = {}
    for i, pkt in enumerate(rdpcap(str(path)), 1):
        ip, tcp = pkt[IP], pkt[TCP]
        ends = frozenset({(ip.src, tcp.sport), (ip.dst, tcp.dport)})
        stream = streams.setdefault(ends, len(streams))
        out.append(
            TcpSegment(
                host_id=path.name,
                boot_id="cap",
                seq=i,
                ts_ns=int(pkt.time * 10**9),
                ts_wall=float(pkt.time),
                provider="tcp",
                probe="receive",
                src=ip.src,
                sport=tcp.sport,
                dst=ip.dst,
                dport=tcp.dport,
                frame=i,
                wire_length=len(pkt),
                frame_bytes=bytes(pkt),
                link_type=1,
                stream=stream,
                conn_uuid=flow_uuid(path.name, "cap", "tcp", stream),
            )  # fmt: skip
        )
    return out


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    need_tools()
    path = tmp_path_factory.mktemp("pcap") / "lo.pcap"
    port = capture_connections(path, [3000, 9000])
    return path, port


def test_one_connection_exported_has_the_same_frames_and_flow_as_in_the_capture(
    capture: tuple[Path, int], tmp_path: Path
) -> None:
    path, port = capture
    original = tshark_conversations(path)
    assert len(original) == 2
    records = reference_records(path)
    second = [r for r in records if r.stream == 1]
    out = tmp_path / "conn.pcap"
    with atomic_output(out, binary=True) as fh:
        stats = write_pcap(fh, second)
    assert stats.written == len(second) and stats.link_type == 1
    exported = tshark_conversations(out)
    ((ends, frames),) = exported.items()
    assert frames == original[ends] == len(second)
    assert tshark_count(out, f"tcp.port == {port} && tcp.flags.syn == 1") == 2
    assert rdpcap(str(out))[0].time == rdpcap(str(path))[second[0].seq - 1].time


def test_a_frame_stored_twice_is_written_once(capture: tuple[Path, int], tmp_path: Path) -> None:
    path, _ = capture
    segments = reference_records(path)
    # The same frames as ip_packet records, as an analyzer storing both kinds would keep them.
    ips = [
        IpPacket(**{k: getattr(s, k) for k in ("host_id", "boot_id", "seq", "ts_ns", "ts_wall", "src", "dst", "frame",
                                               "wire_length", "frame_bytes", "link_type")}, provider="ip", probe="receive")
        for s in segments
    ]  # fmt: skip
    buf = io.BytesIO()
    stats = write_pcap(buf, capture_order(segments, ips))
    assert (stats.written, stats.duplicates) == (len(segments), len(segments))
    out = tmp_path / "all.pcap"
    out.write_bytes(buf.getvalue())
    assert tshark_count(out) == tshark_count(path)


def test_the_global_header_is_classic_pcap_with_the_records_link_type() -> None:
    rec = TcpSegment(host_id="h", boot_id="b", seq=1, ts_ns=0, ts_wall=1.5, provider="tcp", probe="send",
                     frame_bytes=b"\x45" + b"\x00" * 39, link_type=101, wire_length=60)  # fmt: skip
    buf = io.BytesIO()
    write_pcap(buf, [rec])
    data = buf.getvalue()
    assert struct.unpack("<IHHiIII", data[:24]) == (0xA1B2C3D4, 2, 4, 0, 0, 262144, 101)
    assert struct.unpack("<IIII", data[24:40]) == (1, 500000, 40, 60)
    assert data[40:] == rec.frame_bytes


def test_records_without_bytes_make_an_error_not_an_empty_pcap(tmp_path: Path) -> None:
    rec = TcpSegment(host_id="h", boot_id="b", seq=1, ts_ns=0, ts_wall=1.0, provider="tcp", probe="send")
    out = tmp_path / "none.pcap"
    with pytest.raises(PcapExportError, match="--keep-bytes"), atomic_output(out, binary=True) as fh:
        write_pcap(fh, [rec])
    assert list(tmp_path.iterdir()) == []


def test_mixed_link_types_are_refused() -> None:
    common = dict(host_id="h", boot_id="b", ts_ns=0, ts_wall=1.0, provider="tcp", probe="send", frame_bytes=b"x" * 20)
    a = TcpSegment(seq=1, link_type=1, **common)  # type: ignore[arg-type]
    b = TcpSegment(seq=2, link_type=113, **common)  # type: ignore[arg-type]
    with pytest.raises(PcapExportError, match="tcp_segment seq 2: link type 113 differs from 1"):
        write_pcap(io.BytesIO(), [a, b])

"""pcap export: packet records that kept their frame bytes, written as a classic pcap file.

Classic libpcap format (magic a1b2c3d4, version 2.4, microsecond timestamps), which
every tshark/Wireshark/tcpdump reads. One link type per file, as the format requires:
records of another link type are an error, not silently dropped. The same frame may
be stored as several records (an ip_packet and a tcp_segment for one TCP frame):
frames are de-duplicated by (boot_id, frame) when the input is in capture order.

Keep in sync with: the frame_bytes/link_type/frame/wire_length fields of IpPacket,
UdpDatagram and TcpSegment (translators/records.py), the analyzer that fills them
(`nettrail analyze --keep-bytes`), webapp export endpoints (webapp/reports/).
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from translators.records import IpPacket, Record, TcpSegment, UdpDatagram

PACKET_KINDS = ("ip_packet", "udp_datagram", "tcp_segment")
PCAP_MAGIC = 0xA1B2C3D4
SNAPLEN = 262144
LINKTYPE_ETHERNET = 1

PacketRecord = IpPacket | UdpDatagram | TcpSegment


class PcapExportError(ValueError):
    """The records cannot make a pcap (no bytes, mixed link types)."""


@dataclass
class PcapStats:
    written: int = 0
    without_bytes: int = 0
    duplicates: int = 0
    link_type: int | None = None


def global_header(link_type: int, snaplen: int = SNAPLEN) -> bytes:
    return struct.pack("<IHHiIII", PCAP_MAGIC, 2, 4, 0, 0, snaplen, link_type)


def packet_header(ts_wall: float, captured: int, original: int) -> bytes:
    total = round(ts_wall * 1_000_000)
    return struct.pack("<IIII", total // 1_000_000, total % 1_000_000, captured, original)


def capture_order(*streams: Iterable[Record]) -> Iterator[Record]:
    """Merges per-kind streams already sorted by (ts_ns, frame) into one ordered stream."""
    return heapq.merge(*streams, key=lambda r: (r.ts_ns, getattr(r, "frame", None) or 0))


class PcapWriter:
    """Streams records into a pcap; the global header is written with the first frame."""

    def __init__(self, out: BinaryIO, link_type: int | None = None) -> None:
        self.out = out
        self.stats = PcapStats(link_type=link_type)
        self._key: tuple[int, int] | None = None
        self._idents: set[tuple[str, str]] = set()
        if link_type is not None:
            out.write(global_header(link_type))

    def write(self, record: Record) -> bool:
        """Writes the record's frame; False when it has no bytes or repeats the last frame."""
        data = getattr(record, "frame_bytes", None)
        if data is None:
            self.stats.without_bytes += 1
            return False
        if self._seen_frame(record):
            self.stats.duplicates += 1
            return False
        self._check_link(record)
        original = max(getattr(record, "wire_length", None) or len(data), len(data))
        self.out.write(packet_header(record.ts_wall, len(data), original))
        self.out.write(data)
        self.stats.written += 1
        return True

    def _seen_frame(self, record: Record) -> bool:
        """True for a second record of one frame. Copies share (ts_ns, frame), so in capture
        order they are neighbours: only the frames of the current timestamp are remembered."""
        frame = getattr(record, "frame", None)
        if frame is None:
            return False
        key = (record.ts_ns, frame)
        if key != self._key:
            self._key, self._idents = key, set()
        ident = (record.host_id, record.boot_id)
        if ident in self._idents:
            return True
        self._idents.add(ident)
        return False

    def _check_link(self, record: Record) -> None:
        link = getattr(record, "link_type", None) or LINKTYPE_ETHERNET
        if self.stats.link_type is None:
            self.stats.link_type = link
            self.out.write(global_header(link))
        elif link != self.stats.link_type:
            raise PcapExportError(
                f"{record.kind} seq {record.seq}: link type {link} differs from {self.stats.link_type};"
                " a classic pcap holds one link type (export the captures separately)"
            )

    def close(self) -> PcapStats:
        """An export with no frame at all is an error: an empty pcap would look like success."""
        if self.stats.written == 0:
            hint = " (import the capture with 'nettrail analyze --keep-bytes')" if self.stats.without_bytes else ""
            raise PcapExportError(f"no packet record with frame bytes to export{hint}")
        return self.stats


def write_pcap(out: BinaryIO, records: Iterable[Record]) -> PcapStats:
    """Writes every packet record with bytes; other kinds are ignored."""
    writer = PcapWriter(out)
    for record in records:
        if record.kind in PACKET_KINDS:
            writer.write(record)
    return writer.close()

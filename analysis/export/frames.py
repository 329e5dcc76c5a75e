"""Keep captured frame bytes on packet records, so stored captures can be exported as pcap.

The capture pipeline builds packet records from a batch of frames; `with_frame_bytes`
copies each frame's captured bytes and link type from that batch onto the ip_packet,
udp_datagram and tcp_segment records it yielded (matched by frame number). Used by analysis/capture/file_records.py
(`nettrail analyze FILE --store --packets` or `--keep-bytes`).
Keep in sync with: translators/packet_batch.py (Batch), analysis/export/pcap.py,
the frame_bytes/link_type fields in translators/records.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from analysis.export.pcap import PACKET_KINDS
from translators.records import Record


def frame_of(batch: Any, frame: int) -> tuple[bytes, int]:
    """(captured bytes, link type) of a frame number inside `batch` (translators.packet_batch.Batch)."""
    j = frame - batch.first_frame
    if not 0 <= j < len(batch):
        raise IndexError(f"frame {frame} is not in the batch starting at frame {batch.first_frame}")
    start = int(batch.data_off[j])
    return bytes(batch.buf[start : start + int(batch.caplen[j])]), int(batch.linktype[j])


def with_frame_bytes(records: Iterable[Record], batch: Any) -> Iterator[Record]:
    """Yields the records, packet records with frame_bytes and link_type set from the batch."""
    for rec in records:
        frame = getattr(rec, "frame", None)
        if rec.kind in PACKET_KINDS and frame is not None:
            data, link = frame_of(batch, frame)
            rec.frame_bytes = data  # type: ignore[attr-defined]
            rec.link_type = link  # type: ignore[attr-defined]
        yield rec

"""Which packet decoder reads a capture: plain Python for a small file, numpy for the rest.

Importing numpy (with its OpenBLAS initialisation) costs about 0.1-0.15 s, more than
translators/packet_rows.py takes to decode a few thousand packets one at a time, so a
file below SMALL_BYTES is read with ``CaptureReader.rows()`` and decoded in Python, and
numpy is never imported (issue 17 item 7: a 10-packet capture must be analysed in under
0.3 s). Both decoders produce the same values (tests/test_packet_rows.py), so the
choice changes the time, never the output. tests/test_analyze_startup.py checks that a
small capture loads no numpy.

Keep in sync with: nettrail/commands/analyze.py (consume), analysis/capture/file_records.py.
"""

from __future__ import annotations

from collections.abc import Iterator

from analysis.capture.pcap import CaptureReader
from translators.packet_batch import Batch, Rows
from translators.packet_view import PacketView

# Measured on 9,660 packets cut at 96 bytes (0.83 MiB): Python decodes them in ~0.1 s,
# numpy in ~0.035 s after an import of 0.1-0.2 s, so up to this size Python is still ahead;
# bigger files also gain the decoding worker process (nettrail/commands/analyze.py), which
# numpy's compact batches make cheap to feed.
SMALL_BYTES = 1 << 20
# A gzip'd capture holds several times its size in packets.
GZIP_FACTOR = 4


def is_small(reader: CaptureReader) -> bool:
    """Is the capture decoded in plain Python (no numpy)?"""
    return reader.size * (GZIP_FACTOR if reader.compressed else 1) < SMALL_BYTES


def decoded_batches(reader: CaptureReader, want_options: bool) -> Iterator[tuple[PacketView, Batch | Rows]]:
    """Each chunk of the capture decoded, with the batch it came from (frame bytes for export)."""
    if is_small(reader):
        from translators.packet_rows import decode_rows

        for rows in reader.rows():
            yield decode_rows(rows, want_options=want_options), rows
        return
    from translators.packet import decode_batch

    for batch in reader.batches():
        yield decode_batch(batch, want_options=want_options), batch

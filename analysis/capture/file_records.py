"""Every record ``nettrail analyze`` derives from a capture file, as one stream.

``capture_records(path, name)`` runs the capture pipeline over a file and yields its
records (per-packet records with ``packets=True``, then the connection summaries, then
the alerts); host_id is the capture name, boot_id the capture id (``capture_id``), so
re-importing the same file stores nothing twice. Used by ``nettrail analyze --store /
--server`` and by the webapp's upload; storing them is the webapp's job
(webapp/traces/capture_store.py).
Keep in sync with: nettrail/commands/analyze.py (the printed analysis of the same file).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator

from analysis.capture.decoding import decoded_batches
from analysis.capture.pcap import CaptureReader
from analysis.flows.capture_flows import CapturePipeline
from translators.records import Record


def capture_id(path: str) -> str:
    """boot_id of a capture: the first 16 hex digits of the file's sha256."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def capture_records(
    path: str, name: str | None = None, packets: bool = False, compat: str = "upstream", keep_bytes: bool = False
) -> Iterator[Record]:
    """Every record `nettrail analyze` derives from a capture file; raises CaptureError/OSError.
    keep_bytes: packet records carry their frame's bytes (for pcap export, analysis/export/frames.py)."""
    from analysis.export.frames import with_frame_bytes  # the pcap writer: only for stored records

    pipeline = CapturePipeline(name or os.path.basename(path), capture_id(path), packets=packets, compat=compat)
    with CaptureReader(path) as reader:
        for decoded, batch in decoded_batches(reader, want_options=packets):
            records = pipeline.feed(decoded)
            yield from with_frame_bytes(records, batch) if keep_bytes else records
    yield from pipeline.connections()
    yield from pipeline.alerts()

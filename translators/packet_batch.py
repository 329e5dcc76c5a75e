"""The columnar packet batch: the one shape every packet source hands to the packet decoder.

A batch is a buffer of captured frames plus one numpy column per per-packet field (where
the frame starts, captured and wire length, timestamp in ns, link type, interface, file
offset). It lives in ``translators`` because the pure decoding layer consumes it and must
import nothing from the collector; the sources (the capture-file reader and the live
socket) import it from here and fill it.

Keep in sync with: translators/packet.py (the columns it reads and the PAD bytes it may
read past a frame), analysis/capture/pcap.py and collector/sources/live.py (which fill it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# Zero bytes after the data of every batch buffer: the decoder reads fixed-size header
# blocks, so a header at the very end of the buffer still reads whole.
PAD = 64

IntArray = npt.NDArray[np.int64]


@dataclass
class Batch:
    """Packets of one chunk: ``buf`` plus one array entry per packet."""

    buf: bytes | bytearray  # packet data, followed by at least PAD zero bytes
    data_off: IntArray
    caplen: IntArray
    wirelen: IntArray
    ts_ns: IntArray
    linktype: IntArray
    iface: IntArray
    file_off: IntArray
    first_frame: int

    def __len__(self) -> int:
        return len(self.data_off)

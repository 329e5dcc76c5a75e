"""The columnar packet batch: the one shape every packet source hands to the packet decoder.

A batch is a buffer of captured frames plus one numpy column per per-packet field (where
the frame starts, captured and wire length, timestamp in ns, link type, interface, file
offset). It lives in ``translators`` because the pure decoding layer consumes it and must
import nothing from the collector; the sources (the capture-file reader and the live
socket) import it from here and fill it.

``Rows`` is the same batch with Python lists for columns: what the capture reader hands
translators/packet_rows.py for a small file, which is decoded without importing numpy
(numpy's import alone costs more than decoding a few thousand packets in Python; issue 17
item 7). This module therefore imports numpy only for type checking.

Keep in sync with: translators/packet.py and translators/packet_rows.py (the columns they
read and the PAD bytes they may read past a frame), analysis/capture/pcap.py and
collector/sources/live.py (which fill them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    IntArray = npt.NDArray[np.int64]

# Zero bytes after the data of every batch buffer: the decoder reads fixed-size header
# blocks, so a header at the very end of the buffer still reads whole.
PAD = 64


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


@dataclass
class Rows:
    """The packets of one chunk as Python lists: the fields of :class:`Batch`, one entry per packet."""

    buf: bytes | bytearray  # packet data, followed by at least PAD zero bytes
    data_off: list[int]
    caplen: list[int]
    wirelen: list[int]
    ts_ns: list[int]
    linktype: list[int]
    iface: list[int]
    file_off: list[int]
    first_frame: int

    def __len__(self) -> int:
        return len(self.data_off)

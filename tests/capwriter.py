"""Test helper: write classic pcap and pcapng files byte by byte, in either byte order.

Independent of the reader under test (and of scapy's writer, which only writes the
host's byte order): every header is packed here with struct, so tests control exactly
which bytes the reader sees, damaged ones included.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass
class Pkt:
    data: bytes
    ts_ns: int
    iface: int = 0
    orig_len: int | None = None


def pcap(
    packets: Iterable[Pkt], linktype: int = 1, order: str = "<", nano: bool = False, snaplen: int = 65535
) -> bytes:
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = [struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)]
    for p in packets:
        sec, frac = divmod(p.ts_ns, 1_000_000_000)
        if not nano:
            frac //= 1000
        out.append(struct.pack(order + "IIII", sec, frac, len(p.data), p.orig_len or len(p.data)) + p.data)
    return b"".join(out)


def _pad(b: bytes) -> bytes:
    return b + b"\0" * (-len(b) % 4)


def _block(order: str, btype: int, body: bytes) -> bytes:
    body = _pad(body)
    length = len(body) + 12
    return struct.pack(order + "II", btype, length) + body + struct.pack(order + "I", length)


def _option(order: str, code: int, value: bytes) -> bytes:
    return struct.pack(order + "HH", code, len(value)) + _pad(value)


def shb(order: str = "<") -> bytes:
    return _block(order, 0x0A0D0D0A, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1))


def idb(
    linktype: int, order: str = "<", tsresol: int | None = None, name: str | None = None, snaplen: int = 0
) -> bytes:
    opts = b""
    if name is not None:
        opts += _option(order, 2, name.encode())
    if tsresol is not None:
        opts += _option(order, 9, bytes([tsresol]))
    if opts:
        opts += _option(order, 0, b"")
    return _block(order, 1, struct.pack(order + "HHI", linktype, 0, snaplen) + opts)


def epb(p: Pkt, order: str = "<", ticks_per_s: int = 1_000_000) -> bytes:
    ticks = p.ts_ns * ticks_per_s // 1_000_000_000
    head = struct.pack(
        order + "IIIII", p.iface, ticks >> 32, ticks & 0xFFFFFFFF, len(p.data), p.orig_len or len(p.data)
    )
    return _block(order, 6, head + p.data)


def spb(p: Pkt, order: str = "<") -> bytes:
    return _block(order, 3, struct.pack(order + "I", p.orig_len or len(p.data)) + p.data)


def pcapng(sections: Sequence[tuple[str, Sequence[tuple[int, int | None]], Sequence[Pkt]]]) -> bytes:
    """sections: (byte order, [(linktype, tsresol)], packets) each."""
    out = []
    for order, ifaces, packets in sections:
        out.append(shb(order))
        rates = []
        for linktype, tsresol in ifaces:
            out.append(idb(linktype, order, tsresol))
            rates.append(10 ** (tsresol if tsresol is not None else 6))
        out.extend(epb(p, order, rates[p.iface]) for p in packets)
    return b"".join(out)

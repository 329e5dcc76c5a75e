"""Streaming capture-file reader: classic pcap and pcapng (optionally gzip'd) into packet batches.

The file is read in chunks (never whole); each chunk's records are walked once to find
where every packet starts, then the per-record header fields are pulled out with numpy
in one go. A batch is the chunk's bytes plus column arrays (data offset, captured and
wire length, timestamp in ns, link type, interface) that ``translators.packet`` decodes
in bulk. ``rows()`` gives the same chunks with Python lists for columns
(translators.packet_batch.Rows, for translators/packet_rows.py): a small capture is read
and decoded without importing numpy, which is imported only by the methods that build
numpy batches.

Formats: classic pcap in both byte orders with microsecond or nanosecond timestamps
(magics a1b2c3d4 / a1b23c4d), pcapng sections in either byte order with SHB, IDB
(per-interface link type, if_tsresol, if_tsoffset, if_name), EPB, SPB and the obsolete
PB. Damaged records are skipped and counted (``malformed``) when the reader can find
the next record; a file whose header cannot be parsed raises :class:`CaptureError`
naming the byte offset.

Keep in sync with: translators/packet_batch.py (Batch, the columns it fills),
translators/packet.py (the columns it reads) and the link-type numbers it understands.
"""

from __future__ import annotations

import gzip
import io
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from translators.packet_batch import PAD, Batch, Rows

PCAP_MAGIC_US = 0xA1B2C3D4
PCAP_MAGIC_NS = 0xA1B23C4D
PCAPNG_SHB = 0x0A0D0D0A
PCAPNG_BOM = 0x1A2B3C4D
GZIP_MAGIC = b"\x1f\x8b"

# A record claiming more than this is damage, not data (Wireshark's limit for most link types).
MAX_RECORD = 262144 * 4
CHUNK = 8 << 20
TS_LIMIT = (1 << 62) - 1
# Keep the first few damaged-record offsets for warnings; count the rest.
MAX_REPORTED = 10


class CaptureError(Exception):
    """The file cannot be read as a capture at all: names the file and the byte offset."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"{path}: byte offset {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


@dataclass
class Interface:
    """One capture interface (pcapng IDB; classic pcap has exactly one)."""

    linktype: int
    ts_div: int = 1000  # ticks -> ns: ns = ticks * ts_mul // ts_div
    ts_mul: int = 1
    ts_offset_s: int = 0
    name: str | None = None
    snaplen: int = 0


@dataclass
class Damage:
    """Counts and first offsets of records that could not be used."""

    count: int = 0
    first: list[tuple[int, str]] = field(default_factory=list)

    def add(self, offset: int, reason: str) -> None:
        self.count += 1
        if len(self.first) < MAX_REPORTED:
            self.first.append((offset, reason))


def _tsresol(value: int) -> tuple[int, int]:
    """if_tsresol byte -> (mul, div) turning ticks into ns."""
    if value & 0x80:
        exp = value & 0x7F
        # 2^-exp seconds per tick
        return 10**9, 1 << exp if exp < 63 else 1 << 62
    exp = value
    if exp <= 9:
        return 10 ** (9 - exp), 1
    return 1, 10 ** min(exp - 9, 18)


class CaptureReader:
    """Iterate a capture file as :class:`Batch` objects; see the module docstring."""

    def __init__(self, path: str, chunk_size: int = CHUNK) -> None:
        self.path = path
        self.chunk_size = chunk_size
        self.damage = Damage()
        self.interfaces: list[Interface] = []
        self.format = ""
        self.compressed = False
        self._raw = open(path, "rb")  # noqa: SIM115 - closed in close()
        self._f: BinaryIO = self._raw
        self._pos = 0  # offset in the (decompressed) stream of the first unconsumed byte
        self._frame = 0
        self.size = self._file_size()
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    # --- public -------------------------------------------------------------------

    def progress(self) -> int:
        """Bytes of the file on disk consumed so far (compressed bytes for gzip)."""
        return self._raw.tell()

    def close(self) -> None:
        if self._f is not self._raw:
            self._f.close()
        self._raw.close()

    def __enter__(self) -> CaptureReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def batches(self) -> Iterator[Batch]:
        """The packets, chunk by chunk, with numpy columns."""
        if self.format == "pcap":
            for buf, offs in self._pcap_chunks():
                yield self._pcap_batch(buf, offs, self._order)
        else:
            for buf, cols in self._pcapng_chunks():
                yield self._pcapng_batch(buf, cols)

    def rows(self) -> Iterator[Rows]:
        """The same chunks with Python lists for columns: no numpy (for small captures)."""
        if self.format == "pcap":
            for buf, offs in self._pcap_chunks():
                yield self._pcap_rows(buf, offs, self._order)
        else:
            for buf, cols in self._pcapng_chunks():
                yield self._pcapng_rows(buf, cols)

    # --- opening ------------------------------------------------------------------

    def _file_size(self) -> int:
        try:
            self._raw.seek(0, io.SEEK_END)
            size = self._raw.tell()
            self._raw.seek(0)
            return size
        except OSError:
            return 0

    def _read(self, n: int) -> bytes:
        try:
            data = self._f.read(n)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise CaptureError(self.path, self._pos, f"read failed: {exc}") from None
        return data

    def _open(self) -> None:
        head = self._raw.read(2)
        self._raw.seek(0)
        if head == GZIP_MAGIC:
            self.compressed = True
            self._f = gzip.GzipFile(fileobj=self._raw, mode="rb")  # type: ignore[assignment]
        first = self._read(4)
        if len(first) < 4:
            raise CaptureError(self.path, 0, f"file too short for a capture header ({len(first)} bytes)")
        le = struct.unpack("<I", first)[0]
        be = struct.unpack(">I", first)[0]
        if le in (PCAP_MAGIC_US, PCAP_MAGIC_NS) or be in (PCAP_MAGIC_US, PCAP_MAGIC_NS):
            self._open_pcap(first, "<" if le in (PCAP_MAGIC_US, PCAP_MAGIC_NS) else ">")
        elif le == PCAPNG_SHB:
            self.format = "pcapng"
            self._pending = first
        else:
            raise CaptureError(self.path, 0, f"bad magic number 0x{be:08x}: not a pcap or pcapng file")

    def _open_pcap(self, first: bytes, order: str) -> None:
        rest = self._read(20)
        if len(rest) < 20:
            raise CaptureError(self.path, 4, "truncated pcap file header")
        magic = struct.unpack(order + "I", first)[0]
        _major, _minor, _zone, _sig, snaplen, network = struct.unpack(order + "HHiIII", rest)
        self.format = "pcap"
        self._order = order
        ns = magic == PCAP_MAGIC_NS
        # FCS-length bits live in the upper bits of the link-type word.
        self.interfaces = [
            Interface(linktype=network & 0x0FFFFFFF, ts_mul=1 if ns else 1000, ts_div=1, snaplen=snaplen)
        ]
        self._pos = 24
        self._pending = b""

    # --- classic pcap ---------------------------------------------------------------

    def _pcap_chunks(self) -> Iterator[tuple[bytearray, list[int]]]:
        """-> (chunk buffer, offsets of its records); the caller builds the batch before the next."""
        order = self._order
        hdr = struct.Struct(order + "I")
        carry = self._pending
        eof = False
        limit = max(MAX_RECORD, self.interfaces[0].snaplen)
        while not eof:
            buf, n, eof = self._fill(carry)
            offs: list[int] = []
            off = 0
            unpack = hdr.unpack_from
            stop = False
            while off + 16 <= n:
                incl = unpack(buf, off + 8)[0]
                if incl > limit:
                    self.damage.add(self._pos + off, f"record length {incl} exceeds {limit}; rest of file skipped")
                    stop = True
                    break
                end = off + 16 + incl
                if end > n:
                    break
                offs.append(off)
                off = end
            if stop:
                eof = True
            elif eof and off < n:
                self.damage.add(self._pos + off, f"truncated record: {n - off} bytes left at end of file")
            if offs:
                yield buf, offs
            self._pos += off
            carry = bytes(buf[off:n]) if not stop else b""
            if eof:
                break

    def _fill(self, carry: bytes) -> tuple[bytearray, int, bool]:
        """A fresh batch buffer: carry, then up to chunk_size new bytes, then PAD zero bytes.

        -> (buffer, bytes used, end of file). The zero tail lets the decoder read fixed-size
        header blocks at the very end without bounds checks."""
        size = len(carry) + self.chunk_size
        buf = bytearray(size + PAD)
        buf[: len(carry)] = carry
        n = len(carry)
        eof = False
        with memoryview(buf) as view:
            while n < size:
                try:
                    got = self._f.readinto(view[n:size])  # type: ignore[attr-defined]
                except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
                    # a cut or corrupt compressed stream: keep what came before, like a truncated file
                    self.damage.add(self._pos + n, f"compressed data ends or breaks here ({exc}); rest of file skipped")
                    got = 0
                except OSError as exc:
                    raise CaptureError(self.path, self._pos + n, f"read failed: {exc}") from None
                if not got:
                    eof = True
                    break
                n += got
        return buf, n, eof

    def _pcap_batch(self, buf: bytearray, offs: list[int], order: str) -> Batch:
        import numpy as np  # here, not at the top: small captures are read with rows() and no numpy

        u8 = np.frombuffer(buf, np.uint8)
        rec = np.asarray(offs, dtype=np.int64)
        idx = rec[:, None] + np.arange(16, dtype=np.int64)
        fields = np.ascontiguousarray(u8[idx]).view(np.dtype(order + "u4")).astype(np.int64)
        iface = self.interfaces[0]
        ts = fields[:, 0] * 1_000_000_000 + fields[:, 1] * iface.ts_mul
        count = len(offs)
        batch = Batch(
            buf=buf,
            data_off=rec + 16,
            caplen=fields[:, 2],
            wirelen=np.maximum(fields[:, 3], fields[:, 2]),
            ts_ns=ts,
            linktype=np.full(count, iface.linktype, dtype=np.int64),
            iface=np.zeros(count, dtype=np.int64),
            file_off=rec + self._pos,
            first_frame=self._frame + 1,
        )
        self._frame += count
        return batch

    def _pcap_rows(self, buf: bytearray, offs: list[int], order: str) -> Rows:
        """_pcap_batch's columns as lists, read record by record."""
        unpack = struct.Struct(order + "IIII").unpack_from
        iface = self.interfaces[0]
        mul = iface.ts_mul
        ts, caplen, wirelen = [], [], []
        for off in offs:
            sec, frac, incl, orig = unpack(buf, off)
            ts.append(sec * 1_000_000_000 + frac * mul)
            caplen.append(incl)
            wirelen.append(max(orig, incl))
        count = len(offs)
        rows = Rows(
            buf=buf, data_off=[o + 16 for o in offs], caplen=caplen, wirelen=wirelen, ts_ns=ts,
            linktype=[iface.linktype] * count, iface=[0] * count, file_off=[o + self._pos for o in offs],
            first_frame=self._frame + 1,
        )  # fmt: skip
        self._frame += count
        return rows

    # --- pcapng ---------------------------------------------------------------------

    def _pcapng_chunks(self) -> Iterator[tuple[bytearray, tuple[list[int], ...]]]:
        """-> (chunk buffer, its packets' columns as lists); the caller builds the batch before the next."""
        carry = self._pending
        eof = False
        self._order = "<"
        while True:
            buf, n, eof = self._fill(carry)
            cols: tuple[list[int], ...] = ([], [], [], [], [], [], [])
            off, stop = self._walk_pcapng(buf, n, cols, eof)
            if cols[0]:
                yield buf, cols
            self._pos += off
            carry = b"" if stop else bytes(buf[off:n])
            if stop or eof:
                break

    def _walk_pcapng(self, buf: bytearray, n: int, cols: tuple[list[int], ...], eof: bool) -> tuple[int, bool]:
        """Walk whole blocks in buf[:n]; returns (bytes consumed, stop reading)."""
        off = 0
        while off + 12 <= n:
            order = self._order
            btype, blen = struct.unpack_from(order + "II", buf, off)
            if btype == PCAPNG_SHB:
                bom = struct.unpack_from("<I", buf, off + 8)[0]
                if bom == PCAPNG_BOM:
                    order = "<"
                elif bom == 0x4D3C2B1A:
                    order = ">"
                else:
                    return self._fatal_or_stop(off, "pcapng section header with a bad byte-order magic")
                self._order = order
                blen = struct.unpack_from(order + "I", buf, off + 4)[0]
            if blen < 12 or blen % 4 or blen > MAX_RECORD + 64:
                return self._fatal_or_stop(off, f"block length {blen} is impossible")
            if off + blen > n:
                if eof:
                    self.damage.add(self._pos + off, f"truncated block: {n - off} of {blen} bytes at end of file")
                    return off, True
                break
            trailer = struct.unpack_from(order + "I", buf, off + blen - 4)[0]
            if trailer != blen:
                return self._fatal_or_stop(off, f"block length {blen} does not match its trailer {trailer}")
            if btype == PCAPNG_SHB:
                self.interfaces = []
            elif btype == 1:
                self._idb(buf, off, blen, order)
            elif btype in (6, 3, 2):
                self._packet_block(buf, off, blen, order, btype, cols)
            off += blen
        return off, False

    def _fatal_or_stop(self, off: int, reason: str) -> tuple[int, bool]:
        if self._pos + off == 0:
            raise CaptureError(self.path, 0, reason)
        self.damage.add(self._pos + off, reason + "; rest of file skipped")
        return off, True

    def _idb(self, buf: bytes | bytearray, off: int, blen: int, order: str) -> None:
        if blen < 20:
            self.damage.add(self._pos + off, "interface block too short")
            self.interfaces.append(Interface(linktype=-1))
            return
        linktype, _res, snaplen = struct.unpack_from(order + "HHI", buf, off + 8)
        iface = Interface(linktype=linktype, snaplen=snaplen, ts_mul=1000, ts_div=1)
        for code, value in _options(buf, off + 16, off + blen - 4, order):
            if code == 9 and value:
                iface.ts_mul, iface.ts_div = _tsresol(value[0])
            elif code == 14 and len(value) == 8:
                iface.ts_offset_s = struct.unpack(order + "q", value)[0]
            elif code == 2:
                iface.name = value.split(b"\0", 1)[0].decode("utf-8", "replace")
        self.interfaces.append(iface)

    def _packet_block(
        self, buf: bytes | bytearray, off: int, blen: int, order: str, btype: int, cols: tuple[list[int], ...]
    ) -> None:
        data_off, caplen, wirelen, ts, ifc, file_off, links = cols
        if btype == 6:
            if blen < 32:
                self.damage.add(self._pos + off, "enhanced packet block too short")
                return
            if_id, hi, lo, incl, orig = struct.unpack_from(order + "IIIII", buf, off + 8)
            start = off + 28
        elif btype == 2:
            if blen < 32:
                self.damage.add(self._pos + off, "packet block too short")
                return
            if_id, _drops, hi, lo, incl, orig = struct.unpack_from(order + "HHIIII", buf, off + 8)
            start = off + 28
        else:
            orig = struct.unpack_from(order + "I", buf, off + 8)[0]
            if_id, hi, lo = 0, -1, 0
            start = off + 12
            incl = min(orig, blen - 16)
        if start + incl > off + blen - 4:
            self.damage.add(self._pos + off, f"captured length {incl} runs past the end of its block")
            return
        if if_id >= len(self.interfaces) or self.interfaces[if_id].linktype < 0:
            self.damage.add(self._pos + off, f"packet names interface {if_id}, which was not described")
            return
        iface = self.interfaces[if_id]
        if hi < 0:  # simple packet block: no timestamp, reuse the previous one
            t = ts[-1] if ts else 0
        else:
            t = ((hi << 32) | lo) * iface.ts_mul // iface.ts_div + iface.ts_offset_s * 1_000_000_000
            t = min(max(t, -TS_LIMIT), TS_LIMIT)  # absurd resolutions/offsets must not overflow the int64 column
        data_off.append(start)
        caplen.append(incl)
        wirelen.append(max(orig, incl))
        ts.append(t)
        ifc.append(if_id)
        file_off.append(self._pos + off)
        links.append(iface.linktype)

    def _pcapng_batch(self, buf: bytearray, cols: tuple[list[int], ...]) -> Batch:
        import numpy as np  # here, not at the top: small captures are read with rows() and no numpy

        data_off, caplen, wirelen, ts, ifc, file_off, links = (np.asarray(c, dtype=np.int64) for c in cols)
        batch = Batch(
            buf=buf,
            data_off=data_off,
            caplen=caplen,
            wirelen=wirelen,
            ts_ns=ts,
            linktype=links,
            iface=ifc,
            file_off=file_off,
            first_frame=self._frame + 1,
        )
        self._frame += len(data_off)
        return batch

    def _pcapng_rows(self, buf: bytearray, cols: tuple[list[int], ...]) -> Rows:
        data_off, caplen, wirelen, ts, ifc, file_off, links = cols
        rows = Rows(
            buf=buf, data_off=data_off, caplen=caplen, wirelen=wirelen, ts_ns=ts, linktype=links, iface=ifc,
            file_off=file_off, first_frame=self._frame + 1,
        )  # fmt: skip
        self._frame += len(data_off)
        return rows

    @property
    def frames(self) -> int:
        return self._frame


def _options(buf: bytes | bytearray, start: int, end: int, order: str) -> Iterator[tuple[int, bytes]]:
    """pcapng options (code, value) between start and end; stops at opt_endofopt or damage."""
    off = start
    while off + 4 <= end:
        code, length = struct.unpack_from(order + "HH", buf, off)
        if code == 0:
            return
        value_end = off + 4 + length
        if value_end > end:
            return
        yield code, bytes(buf[off + 4 : value_end])
        off += 4 + ((length + 3) & ~3)

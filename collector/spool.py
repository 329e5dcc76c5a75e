"""On-disk spool for batches the HTTP sink could not deliver yet.

The spool is a directory of append-only segment files plus one cursor file:

    <dir>/00000000000000000001.seg   entries, oldest segment = lowest number
    <dir>/cursor                     "<segment number> <offset>" of the oldest unacknowledged entry

Each entry is ``MAGIC | u32 payload length | u32 record count | u32 crc32 | payload``
(little endian; the CRC covers the count and the payload). Every append is fsync'd
before it returns, so a batch in the spool survives a crash of the collector. A
segment is never appended to after the spool is reopened: a torn tail left by a
crash stays at the end of an old segment, where the reader detects it (bad magic,
short read or CRC mismatch), logs it and skips the rest of that segment.

The total size of the segments is bounded: when an append would exceed the bound the
oldest segment is deleted and the records it still held are counted in
``lost_records`` (the collector reports them as a LossReport) and logged.

The directory and every one on the way to it must be changeable only by root or the
collector's user (collector/private_dir.py, checked from / without following a
symlink): otherwise the spool refuses to open (UnsafeDirectoryError, a ValueError).

Keep in sync with: collector/sinks/http.py (the only writer and reader) and
docs/collector-sinks.md (the format description).
"""

from __future__ import annotations

import logging
import os
import struct
import typing
import zlib
from dataclasses import dataclass
from pathlib import Path

from collector.private_dir import ensure_private_dir

log = logging.getLogger("nettrail.spool")

MAGIC = b"NTSP"
HEADER = struct.Struct("<4sIII")  # magic, payload length, record count, crc32
# An entry longer than this is taken as corruption, not as a real batch.
MAX_ENTRY_BYTES = 1 << 30
SEGMENT_SUFFIX = ".seg"
CURSOR_NAME = "cursor"
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
# Segments are a fraction of the bound so dropping the oldest one frees a bounded share.
SEGMENTS_PER_BOUND = 8


class SpoolError(Exception):
    """A batch cannot be spooled at all (larger than the whole spool)."""


@dataclass(frozen=True)
class Entry:
    """One spooled batch and where it sits (for ack)."""

    segment: int
    offset: int
    end: int
    records: int
    payload: bytes


def _crc(count: int, payload: bytes) -> int:
    return zlib.crc32(payload, zlib.crc32(struct.pack("<I", count)))


def encode_entry(payload: bytes, records: int) -> bytes:
    return HEADER.pack(MAGIC, len(payload), records, _crc(records, payload)) + payload


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Spool:
    """Bounded, crash-safe FIFO of batches (bytes + record count). Not thread-safe: callers serialise (HttpSink holds a lock)."""

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes < 4096:
            raise ValueError(f"spool max_bytes must be at least 4096, got {max_bytes}")
        self.dir = Path(directory)
        # Made and checked from / with O_NOFOLLOW: no other user can swap a directory on
        # the way for a symlink and have a root collector write or delete elsewhere.
        ensure_private_dir(self.dir)
        self.max_bytes = max_bytes
        self.segment_bytes = max(max_bytes // SEGMENTS_PER_BOUND, 1024)
        self.lost_records = 0  # records dropped because the spool was full
        self.lost_batches = 0
        self.corrupt_segments = 0  # segments whose tail was unreadable
        self._sizes: dict[int, int] = {}
        for path in self.dir.glob(f"*{SEGMENT_SUFFIX}"):
            if path.stem.isdigit():
                self._sizes[int(path.stem)] = path.stat().st_size
        self._cursor = self._load_cursor()
        self._active: int | None = None  # segment open for appends (never one from before a restart)
        # New segments are numbered after every existing one and after the cursor, which
        # may name a segment already deleted (a drained spool): numbers never go back.
        self._next = max(max(self._sizes, default=0), self._cursor[0]) + 1

    # --- state -----------------------------------------------------------------------

    @property
    def total_bytes(self) -> int:
        return sum(self._sizes.values())

    def segments(self) -> list[int]:
        return sorted(self._sizes)

    def _path(self, segment: int) -> Path:
        return self.dir / f"{segment:020d}{SEGMENT_SUFFIX}"

    def _load_cursor(self) -> tuple[int, int]:
        try:
            seg, off = (self.dir / CURSOR_NAME).read_text().split()
            return int(seg), int(off)
        except (OSError, ValueError):
            return (min(self._sizes, default=0), 0)

    def _save_cursor(self) -> None:
        tmp = self.dir / (CURSOR_NAME + ".tmp")
        with open(tmp, "w") as f:
            f.write(f"{self._cursor[0]} {self._cursor[1]}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.dir / CURSOR_NAME)

    def empty(self) -> bool:
        return self.peek() is None

    # --- writing ------------------------------------------------------------------------

    def append(self, payload: bytes, records: int) -> None:
        """Store one batch durably (fsync'd) at the tail, evicting the oldest segments if full."""
        entry = encode_entry(payload, records)
        if len(entry) > self.max_bytes:
            raise SpoolError(f"batch of {len(entry)} bytes is larger than the whole spool ({self.max_bytes} bytes)")
        if self._active is None or self._sizes[self._active] + len(entry) > self.segment_bytes:
            self._open_segment()
        while self.total_bytes + len(entry) > self.max_bytes:
            self._evict_oldest()
        assert self._active is not None
        with open(self._path(self._active), "ab") as f:
            f.write(entry)
            f.flush()
            os.fsync(f.fileno())
        self._sizes[self._active] += len(entry)

    def _open_segment(self) -> None:
        segment = self._next
        self._next += 1
        self._path(segment).touch()
        _fsync_dir(self.dir)
        self._sizes[segment] = 0
        self._active = segment

    def _evict_oldest(self) -> None:
        oldest = min(self._sizes)
        start = self._cursor[1] if self._cursor[0] == oldest else 0
        batches, records = self._count(oldest, start)
        self.lost_batches += batches
        self.lost_records += records
        log.error(
            "spool full (%d bytes): dropped segment %d with %d undelivered batches (%d records)",
            self.max_bytes,
            oldest,
            batches,
            records,
        )
        self._remove(oldest)

    def _count(self, segment: int, start: int) -> tuple[int, int]:
        batches = records = 0
        with open(self._path(segment), "rb") as f:
            pos = start
            while isinstance(found := self._read_at(f, segment, pos), Entry):
                batches += 1
                records += found.records
                pos = found.end
        return batches, records

    def _remove(self, segment: int) -> None:
        self._path(segment).unlink(missing_ok=True)
        del self._sizes[segment]
        if self._active == segment:
            self._active = None
        if self._cursor[0] <= segment:
            self._cursor = (min(self._sizes, default=self._next), 0)
            self._save_cursor()

    # --- reading ---------------------------------------------------------------------------

    @staticmethod
    def _read_at(f: typing.BinaryIO, segment: int, pos: int) -> Entry | str | None:
        """The entry at `pos`, None at the end of the segment, or what is wrong with it."""
        f.seek(pos)
        header = f.read(HEADER.size)
        if not header:
            return None
        if len(header) < HEADER.size:
            return "truncated header"
        magic, length, count, crc = HEADER.unpack(header)
        if magic != MAGIC or length > MAX_ENTRY_BYTES:
            return "bad entry header"
        body = f.read(length)
        if len(body) < length:
            return "truncated entry"
        if _crc(count, body) != crc:
            return "checksum mismatch"
        return Entry(segment, pos, pos + HEADER.size + length, count, body)

    def peek(self) -> Entry | None:
        """The oldest unacknowledged intact batch, or None when the spool is empty."""
        while self._sizes:
            segment, offset = self._cursor
            if segment not in self._sizes:
                later = [s for s in self._sizes if s > segment]
                if not later:
                    return None
                self._cursor = (min(later), 0)
                continue
            with open(self._path(segment), "rb") as f:
                found = self._read_at(f, segment, offset)
            if isinstance(found, Entry):
                return found
            if found is None and segment == self._active:
                return None  # caught up with the writer
            if found is not None:
                self.corrupt_segments += 1
                log.error("spool segment %d damaged at offset %d (%s): skipping its tail", segment, offset, found)
            self._remove(segment)  # fully delivered, or the rest of it is damaged
        return None

    def ack(self, entry: Entry) -> None:
        """The batch was delivered: move past it and delete a segment once it is used up."""
        if entry.segment not in self._sizes:
            return  # its segment was evicted while the batch was being sent (counted lost, yet delivered)
        self._cursor = (entry.segment, entry.end)
        if entry.end >= self._sizes.get(entry.segment, 0):
            self._remove(entry.segment)  # used up (an active one too: the next append opens a new one)
        else:
            self._save_cursor()

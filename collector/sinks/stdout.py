"""Stdout sink: records through the xo formatter in the chosen --libxo style.

Text and HTML stream: one line (or div) per record, flushed after every batch.
JSON and XML must hold one list per record kind (the output contract in
docs/collector.md) while records of different kinds interleave in time, so those
styles spool each kind to its own temporary file and write the document when the
collector stops (SIGINT, SIGTERM, --duration). For a streaming machine-readable
form use `--out -` (JSON lines on stdout).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterable
from typing import IO, TextIO

import msgspec

from translators.kernel import KernelRecord, as_struct
from translators.records import AnyRecord, Record, to_msgpack
from xo import Writer, XoOptions

CONTAINER = "nettrail"
SPOOLED_STYLES = ("json", "xml")


class StdoutSink:
    def __init__(self, options: XoOptions, stream: TextIO | None = None) -> None:
        self.options = options
        self.stream = stream or sys.stdout
        self.spooled = options.style in SPOOLED_STYLES
        self.kinds: dict[str, IO[bytes]] = {}
        self.writer: Writer | None = None
        if not self.spooled:
            self.writer = Writer(self.stream, options)
            self.writer.open_container(CONTAINER)

    def write(self, records: Iterable[Record | KernelRecord]) -> None:
        if self.writer is not None:
            for rec in records:
                self.writer.record(as_struct(rec))
            self.writer.flush()
            return
        for rec in records:
            kind = rec["kind"] if isinstance(rec, dict) else rec.kind
            spool = self.kinds.get(kind)
            if spool is None:
                spool = self.kinds[kind] = tempfile.TemporaryFile()
            data = to_msgpack(rec)  # type: ignore[arg-type]  # a wire dict encodes like its Struct
            spool.write(len(data).to_bytes(4, "little") + data)

    def close(self) -> None:
        if self.writer is None:
            self.writer = Writer(self.stream, self.options)
            self.writer.open_container(CONTAINER)
            for spool in self.kinds.values():
                for rec in _replay(spool):
                    self.writer.record(rec)
                spool.close()
            self.kinds.clear()
        self.writer.close_container(CONTAINER)
        self.writer.finish()


def _replay(spool: IO[bytes]) -> Iterable[Record]:
    """Records back from a spool of length-prefixed msgpack frames."""
    spool.seek(0)
    decoder = msgspec.msgpack.Decoder(AnyRecord)
    while header := spool.read(4):
        size = int.from_bytes(header, "little")
        yield decoder.decode(spool.read(size))

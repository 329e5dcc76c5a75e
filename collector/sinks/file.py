"""File sink: records to FILE.jsonl (one JSON record per line) or FILE.msgpack (a stream of records).

The wire form is translators.records.to_json / to_msgpack, so `decode_batch` and the
ingest API read these files as they are. Each batch is flushed, so a reader can
follow the file while the collector runs. Keep in sync with docs/collector.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

from translators.kernel import KernelRecord
from translators.records import to_json, to_msgpack

SUFFIXES = (".jsonl", ".msgpack")


class FileSink:
    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        self.encode: Callable[[KernelRecord], bytes] = _json_line
        self.stream: BinaryIO = sys.stdout.buffer
        self.owned = False
        if str(path) == "-":
            return
        if path.suffix not in SUFFIXES:
            raise ValueError(f"--out {path}: the file name must end in .jsonl or .msgpack")
        if path.suffix == ".msgpack":
            self.encode = _msgpack
        self.stream = open(path, "wb")  # noqa: SIM115 - closed by close()
        self.owned = True

    def write(self, records: Iterable[KernelRecord]) -> None:
        """Records or their wire dicts (same bytes either way)."""
        encode = self.encode
        data = b"".join(encode(r) for r in records)
        if data:
            self.stream.write(data)
            self.stream.flush()

    def close(self) -> None:
        self.stream.flush()
        if self.owned:
            self.stream.close()


def _json_line(record: KernelRecord) -> bytes:
    return to_json(record) + b"\n"  # type: ignore[arg-type]  # a wire dict encodes like its Struct


def _msgpack(record: KernelRecord) -> bytes:
    return to_msgpack(record)  # type: ignore[arg-type]

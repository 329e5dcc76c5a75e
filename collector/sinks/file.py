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

import msgspec

from translators.kernel import KernelRecord

SUFFIXES = (".jsonl", ".msgpack")
CHUNK = 4096  # records encoded per call
# The encoders of translators.records.to_json / to_msgpack (default settings): a whole
# batch is encoded in one call, the same bytes as one to_json/to_msgpack call per record.
_JSON = msgspec.json.Encoder()
_MSGPACK = msgspec.msgpack.Encoder()


class FileSink:
    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        self.encode: Callable[[list[KernelRecord]], bytes] = _json_lines
        self.stream: BinaryIO = sys.stdout.buffer
        self.owned = False
        if str(path) == "-":
            return
        if path.suffix not in SUFFIXES:
            raise ValueError(f"--out {path}: the file name must end in .jsonl or .msgpack")
        if path.suffix == ".msgpack":
            self.encode = _msgpack_stream
        self.stream = open(path, "wb")  # noqa: SIM115 - closed by close()
        self.owned = True

    def write(self, records: Iterable[KernelRecord]) -> None:
        """Records or their wire dicts (same bytes either way)."""
        batch = records if isinstance(records, list) else list(records)
        if batch:
            for start in range(0, len(batch), CHUNK):  # cache-sized pieces, not one huge buffer
                self.stream.write(self.encode(batch[start : start + CHUNK]))
            self.stream.flush()

    def close(self) -> None:
        self.stream.flush()
        if self.owned:
            self.stream.close()


def _json_lines(records: list[KernelRecord]) -> bytes:
    """One JSON record a line (a wire dict encodes like its Struct)."""
    return _JSON.encode_lines(records)


def _msgpack_stream(records: list[KernelRecord]) -> bytes:
    """The records one after another: the batch encoded as one array, minus the array
    header (fixarray 0x90|n, array16 0xdc n16, array32 0xdd n32)."""
    data = _MSGPACK.encode(records)
    n = len(records)
    return data[1 if n < 16 else 3 if n < 1 << 16 else 5 :]

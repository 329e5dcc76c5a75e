"""File sink: a batch written at once is byte for byte one to_json line / to_msgpack map per record.

Keep in sync with collector/sinks/file.py and translators/records.py (to_json, to_msgpack).
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from test_translators_wire_rows import ENV, few_connections

from collector.sinks.file import FileSink
from translators import kernel
from translators.kernel import KernelRecord, as_struct
from translators.records import to_json, to_msgpack
from translators.siftr import translate_sample_batch


def mixed(n: int) -> list[KernelRecord]:
    """WireRows, wire dicts and Structs of the same events, interleaved."""
    rows = translate_sample_batch(few_connections(n), ENV)
    out: list[KernelRecord] = []
    for i, row in enumerate(rows):
        out.append(row if i % 3 == 0 else msgspec.to_builtins(row) if i % 3 == 1 else as_struct(row))
    return out


@pytest.mark.parametrize("n", [1, 15, 16, 17, 4097, 70_000])
def test_a_jsonl_batch_is_one_to_json_line_per_record(tmp_path: Path, n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel, "VALIDATE", False)
    records = mixed(n)
    sink = FileSink(tmp_path / "r.jsonl")
    sink.write(records)
    sink.write([])
    sink.close()
    assert (tmp_path / "r.jsonl").read_bytes() == b"".join(to_json(r) + b"\n" for r in records)  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [1, 15, 16, 17, 4097, 70_000])
def test_a_msgpack_batch_is_one_to_msgpack_map_per_record(
    tmp_path: Path, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kernel, "VALIDATE", False)
    records = mixed(n)
    sink = FileSink(tmp_path / "r.msgpack")
    sink.write(iter(records[:5]))
    sink.write(records[5:])
    sink.close()
    data = (tmp_path / "r.msgpack").read_bytes()
    assert data == b"".join(to_msgpack(r) for r in records)  # type: ignore[arg-type]

"""Golden output of every record kind in every style (libxo's tests/core/saved, our way).

Each kind is rendered twice (every field set, then only the required ones) through
render_records and compared byte for byte with tests/golden/xo/<kind>.<style>.out.
Regenerate after an intended change, then review the diff:

    NETTRAIL_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/test_xo_golden.py

Keep in sync with: translators/records.py (a new field or kind changes the golden files)
and xo/styles/*.py.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from record_samples import full_record, kind_of, minimal_record

from translators.records import RECORD_TYPES, Record, to_json
from xo import parse_libxo, render_records

GOLDEN = Path(__file__).parent / "golden" / "xo"
REGEN = os.environ.get("NETTRAIL_REGEN_GOLDEN") == "1"
STYLES = {
    "text": "text",
    "xml": "xml",
    "xml-pretty": "xml,pretty",
    "json-pretty": "json,pretty",
    "html-pretty": "html,pretty",
    "html-xpath-keys-units": "html,pretty,xpath,keys,units",
}


def render(records: list[Record], spec: str) -> str:
    out = io.StringIO()
    render_records(records, parse_libxo(spec), out)
    return out.getvalue()


def samples(cls: type[Record]) -> list[Record]:
    return [full_record(cls), minimal_record(cls)]


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("cls", RECORD_TYPES, ids=kind_of)
def test_it_renders_each_record_kind_as_the_golden_file(cls: type[Record], style: str) -> None:
    path = GOLDEN / f"{kind_of(cls)}.{style}.out"
    got = render(samples(cls), STYLES[style])
    if REGEN:
        path.write_text(got, encoding="utf-8")
    assert path.exists(), f"missing {path.name}: run NETTRAIL_REGEN_GOLDEN=1 pytest {Path(__file__).name}"
    assert got == path.read_text(encoding="utf-8"), f"{path.name} differs; regenerate if the change is intended"


def test_every_golden_file_belongs_to_a_record_kind_and_style() -> None:
    expected = {f"{kind_of(cls)}.{style}.out" for cls in RECORD_TYPES for style in STYLES}
    stale = sorted(p.name for p in GOLDEN.glob("*.out") if p.name not in expected)
    if REGEN:
        for name in stale:
            (GOLDEN / name).unlink()
        stale = []
    assert stale == []


@pytest.mark.parametrize("cls", RECORD_TYPES, ids=kind_of)
def test_it_renders_compact_json_that_parses_to_the_pretty_form(cls: type[Record]) -> None:
    compact = json.loads(render(samples(cls), "json"))
    pretty = json.loads((GOLDEN / f"{kind_of(cls)}.json-pretty.out").read_text(encoding="utf-8"))
    assert compact == pretty


@pytest.mark.parametrize("cls", RECORD_TYPES, ids=kind_of)
def test_json_with_underscores_gives_back_the_wire_form_of_each_record(cls: type[Record]) -> None:
    records = samples(cls)
    doc = json.loads(render(records, "json,underscores"))
    instances = doc["nettrail"][kind_of(cls)]  # underscores also rewrites the list's name
    wire = [json.loads(to_json(r)) for r in records]
    assert len(instances) == 2
    for got, want in zip(instances, wire, strict=True):
        assert got == want

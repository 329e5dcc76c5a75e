"""docs/records/ is exactly what `python -m translators.docgen` generates from the schema.

Keep in sync with: translators/docgen.py and translators/records.py.
"""

from __future__ import annotations

from pathlib import Path

from translators import docgen
from translators.records import RECORD_TYPES, describe


def test_the_committed_record_docs_equal_the_generators_output() -> None:
    assert docgen.stale() == [], "docs/records is stale: run scripts/regen-schema and commit it"


def test_every_record_kind_and_field_is_documented_once() -> None:
    files = docgen.render()
    for cls in RECORD_TYPES:
        kind = docgen.kind_of(cls)
        holders = [name for name, text in files.items() if f"## `{kind}`" in text]
        assert len(holders) == 1, kind
        section = files[holders[0]].split(f"## `{kind}`", 1)[1].split("\n## ", 1)[0]
        for d in describe(cls):
            assert f"| `{d.name}` |" in section, f"{kind}.{d.name}"


def test_check_mode_reports_a_hand_edited_file(tmp_path: Path) -> None:
    assert docgen.main(["--out", str(tmp_path)]) == 0
    assert docgen.main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "tcp.md").write_text("edited\n", encoding="utf-8")
    (tmp_path / "extra.md").write_text("not generated\n", encoding="utf-8")
    assert docgen.stale(tmp_path) == ["tcp.md", "extra.md"]
    assert docgen.main(["--check", "--out", str(tmp_path)]) == 1

"""Write one benchmark's own section of docs/benchmarks.md: a section runs from its
`## ` title to the next `## ` title; it is replaced in place, or appended when new.
Used by every benchmark that records its figures (bench_*.py)."""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
HEADER = "# Benchmarks\n\nEach section is owned by one benchmark in `bench/`.\n\n"


def write_section(title: str, body: list[str]) -> None:
    """Replace (or append) the section `title` ("## ...") with title, a blank line and body."""
    text = DOC.read_text(encoding="utf-8") if DOC.exists() else HEADER
    section = "\n".join([title, "", *body, ""])
    if title in text:
        head, rest = text.split(title, 1)
        tail = rest.split("\n## ", 1)
        text = head + section + ("\n## " + tail[1] if len(tail) > 1 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    DOC.write_text(text, encoding="utf-8")

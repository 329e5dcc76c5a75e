"""TEXT style, for people: records as aligned tables, emitted leaves as labelled lines.

Records go to xo/styles/table.py (one table per run of a kind, times in ISO 8601 UTC,
humanised units); a blank line separates a table from what comes before and after it.
Emitted leaves keep libxo's text rendering, except that leaves holding epoch seconds
(EPOCH_NAMES: the records' own time fields and the commands' first_ts, last_ts, ...)
are shown as times, like the tables'. Hierarchy, encoding-only fields and names vanish.

Limits: no locale conversion (Python writes the stream's encoding), no colours ({C:} is
accepted and ignored), no anchors or gettext roles. Errors go to stderr, unescaped.
Keep in sync with: ../shared/docs/libxo.md §5.1, xo/styles/table.py and docs/output.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from translators.records import RECORD_TYPES, FieldDesc, describe
from xo.fields import Field, humanize, printf
from xo.options import XoOptions
from xo.records import kind_of
from xo.styles.base import Renderer
from xo.styles.table import Clock, Tables, is_epoch

if TYPE_CHECKING:
    from xo.writer import Frame, Writer

# Leaves that hold seconds since the epoch, by name: every record time field, and the
# leaves nettrail's commands emit around records (analyze totals, report header).
EPOCH_NAMES = frozenset(
    {d.name for cls in RECORD_TYPES for d in describe(cls) if is_epoch(d)}
    | {"first_ts", "last_ts", "generated_at", "since", "until", "first_seen", "last_seen"}
)


def display_text(f: Field, value: Any, opts: XoOptions) -> str:
    """What a display style shows for one field (no escaping): value, label, units, …"""
    if f.role == "V":
        if not f.fmt:
            text = ""
        elif "h" in f.mods and not opts.no_humanize:
            text = humanize(value, f.mods)
        else:
            text = printf(f.fmt, value)
    elif f.role == "U":
        return (" " if "w" in f.mods else "") + printf(f.fmt, value)
    else:
        text = printf(f.fmt, value)
    return text + (":" if "c" in f.mods else "") + (" " if "w" in f.mods else "")


class TextRenderer(Renderer):
    def __init__(self, writer: Writer) -> None:
        super().__init__(writer)
        self.clock = Clock(self.opts)
        self.tables = Tables(self.write, self.opts, writer.stream, self.clock)
        self.wrote = False  # anything written yet (a new table then starts with a blank line)
        self.after_table = False  # a table just ended: the next text starts with a blank line

    def _text(self, text: str) -> None:
        if not text:
            return
        self.tables.end()
        if self.after_table:
            self.write("\n")
            self.after_table = False
        self.write(text)
        self.wrote = True

    def _end_table(self) -> None:
        if self.tables.end():
            self.after_table = True

    def open(self, frame: Frame, parent: Frame) -> None:
        if frame.kind != "instance":  # each record is an instance of its table's list
            self._end_table()

    def close(self, frame: Frame, parent: Frame) -> None:
        if frame.kind == "list":
            self._end_table()

    def emit(self, items: list[tuple[Field, Any]]) -> None:
        out: list[str] = []
        for f, value in items:
            if f.role == "text":
                out.append(f.content)
            elif f.role == "C" or "e" in f.mods:
                continue  # colours are not enabled; encoding-only fields are not shown
            elif f.role == "V" and f.content.replace("-", "_") in EPOCH_NAMES and _is_number(value):
                out.append(
                    self.clock.time(float(value)) + (":" if "c" in f.mods else "") + (" " if "w" in f.mods else "")
                )
            else:
                out.append(display_text(f, value, self.opts))
        self._text("".join(out))

    def record(self, rec: msgspec.Struct, name: str) -> None:
        table = self.tables.table
        if table is None or table.kind != kind_of(type(rec)):
            self._end_table()
            if self.wrote:
                self.write("\n")
            self.after_table = False
            self.wrote = True
        self.tables.add(rec)

    def error(self, message: str) -> None:
        self.tables.flush()
        self.w.errors.write(message if message.endswith("\n") else message + "\n")

    def message(self, message: str) -> None:
        self._text(message if message.endswith("\n") else message + "\n")

    def flush_pending(self) -> None:
        self.tables.flush()

    def finish(self) -> None:
        self.tables.end()


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def condition(d: FieldDesc) -> str:
    """Template test for 'this brief field has something to show' (None and [] do not); the
    HTML record line uses it."""
    if d.type in (list, dict):
        return f"{{% if r.{d.name} %}}"
    return f"{{% if r.{d.name} is not none %}}"

"""TEXT style: the display line for humans; hierarchy, encoding-only fields and names vanish.

Limits: no locale conversion (Python writes the stream's encoding), no colours ({C:} is
accepted and ignored), no anchors or gettext roles. Errors go to stderr, unescaped.
Keep in sync with: ../shared/docs/libxo.md §5.1 and xo/records.py (the record line).
"""

from __future__ import annotations

from typing import Any

import msgspec

from translators.records import FieldDesc
from xo.fields import Field, humanize, printf
from xo.options import XoOptions
from xo.records import HOST_KEYS, brief_layout, compile_template, kind_of, literal, stream_template
from xo.styles.base import Renderer


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
    def emit(self, items: list[tuple[Field, Any]]) -> None:
        out: list[str] = []
        for f, value in items:
            if f.role == "text":
                out.append(f.content)
            elif f.role == "C" or "e" in f.mods:
                continue  # colours are not enabled; encoding-only fields are not shown
            else:
                out.append(display_text(f, value, self.opts))
        self.write("".join(out))

    def record(self, rec: msgspec.Struct, name: str) -> None:
        stream_template(compile_template(record_source, type(rec), self.opts), self.write, r=rec)

    def error(self, message: str) -> None:
        self.w.errors.write(message if message.endswith("\n") else message + "\n")

    def message(self, message: str) -> None:
        self.write(message if message.endswith("\n") else message + "\n")


def condition(d: FieldDesc) -> str:
    """Template test for 'this brief field has something to show' (None and [] do not)."""
    if d.type in (list, dict):
        return f"{{% if r.{d.name} %}}"
    return f"{{% if r.{d.name} is not none %}}"


def record_source(cls: type[msgspec.Struct], opts: XoOptions) -> str:
    """jinja2 source of the text line of a record kind (see xo/records.py brief_layout)."""
    parts = [literal(kind_of(cls))]
    for item in brief_layout(cls):
        d = item.desc
        body = literal(item.sep) + "".join(_piece(f, d) for f in item.fields)
        parts.append(body if d.key else condition(d) + body + "{% endif %}")
    parts.append("\n")
    return "".join(parts)


def _piece(f: Field, d: FieldDesc) -> str:
    if f.role == "V":
        flt = ("display_host" if d.name in HOST_KEYS else "display_key") if "k" in f.mods else "display"
        return f"{{{{ r.{d.name}|{flt}({f.fmt!r}) }}}}"
    return literal(display_text(f, f.content, XoOptions()))

"""HTML style: each output line a <div class="line">, each piece a div classed by its role.

Values are <div class="data" data-tag=…> with, in libxo's order, data-units (units),
data-xpath (xpath), data-type/data-help (info), data-key (keys), data-number (humanized).
Containers, lists and instances are invisible except in data-xpath. `pretty` puts each
div on its own line, children indented 2 spaces. Limits: no colours, no anchors.
Keep in sync with: ../shared/docs/libxo.md §5.4, §7, §9 and xo/records.py.
"""

from __future__ import annotations

from typing import Any

import msgspec

from translators.records import FieldDesc
from xo import escape
from xo.fields import Field, humanize, printf
from xo.options import XoOptions
from xo.records import (
    HOST_KEYS,
    brief_layout,
    compile_template,
    key_predicates,
    kind_of,
    literal,
    stream_template,
)
from xo.styles.base import Renderer
from xo.styles.text import condition

ROLE_CLASSES = {
    "L": "label",
    "N": "note",
    "T": "title",
    "P": "padding",
    "D": "decoration",
    "U": "units",
    "E": "error",
    "W": "warning",
}


def div(cls: str, text: str, attrs: str, opts: XoOptions) -> str:
    ind, nl = ("  ", "\n") if opts.pretty else ("", "")
    return f'{ind}<div class="{cls}"{attrs}>{text}</div>{nl}'


class HtmlRenderer(Renderer):
    def __init__(self, writer: Any) -> None:
        super().__init__(writer)
        self.line_open = False
        self.nl = "\n" if self.opts.pretty else ""

    def _piece(self, cls: str, text: str, attrs: str = "") -> None:
        if not self.line_open:
            self.write('<div class="line">' + self.nl)
            self.line_open = True
        self.write(div(cls, escape.xml_text(text), attrs, self.opts))

    def _end_line(self) -> None:
        if self.line_open:
            self.write("</div>" + self.nl)
            self.line_open = False
        else:
            self.write('<div class="blank-line"></div>' + self.nl)

    def _decorate(self, f: Field) -> None:
        if "c" in f.mods:
            self._piece("decoration", ":")
        if "w" in f.mods and f.role != "U":
            self._piece("padding", " ")

    def emit(self, items: list[tuple[Field, Any]]) -> None:
        units_moved = False
        for f, value in items:
            if f.role == "text":
                self._text(f.content)
            elif f.role == "V":
                if "e" in f.mods:
                    continue
                self._value(f, value)
                units_moved = self.opts.units and f.units is not None
            elif f.role == "U":
                if "w" in f.mods:
                    self._piece("padding", " ")
                if not units_moved:
                    self._piece("units", printf(f.fmt, value))
                units_moved = False
            elif f.role in ROLE_CLASSES:
                self._piece(ROLE_CLASSES[f.role], printf(f.fmt, value))
                self._decorate(f)

    def _text(self, text: str) -> None:
        lines = text.split("\n")
        for n, segment in enumerate(lines):
            if segment:
                self._piece("text", segment)
            if n < len(lines) - 1:
                self._end_line()

    def _value(self, f: Field, value: Any) -> None:
        humanized = "h" in f.mods and not self.opts.no_humanize and f.fmt
        if not f.fmt:
            text = ""
        elif humanized:
            text = humanize(value, f.mods)
        else:
            text = printf(f.fmt, value)
        attrs = f' data-tag="{escape.xml_attr(f.content)}"'
        if self.opts.units and f.units:
            attrs += f' data-units="{escape.xml_attr(f.units)}"'
        if self.opts.xpath:
            path = self.w.xpath(for_key="k" in f.mods, pretty=self.opts.pretty) + "/" + f.content
            attrs += f' data-xpath="{escape.xml_attr(path)}"'
        if self.opts.info and f.content in self.w.info:
            kind, help_text = self.w.info[f.content]
            attrs += f' data-type="{escape.xml_attr(kind)}" data-help="{escape.xml_attr(help_text)}"'
        if self.opts.keys and "k" in f.mods:
            attrs += ' data-key="key"'
        if humanized:
            attrs += f' data-number="{escape.xml_attr(printf(f.efmt, value))}"'
        self._piece("data", text, attrs)
        self._decorate(f)

    def _own_line(self, cls: str, message: str) -> None:
        if self.line_open:
            self._end_line()
        self._piece(cls, message.rstrip("\n"))
        self._end_line()

    def error(self, message: str) -> None:
        self._own_line("error", message)

    def message(self, message: str) -> None:
        self._own_line("message", message)

    def flush_pending(self) -> None:
        """Nothing is held back: an open line div is closed by its newline or finish()."""

    def finish(self) -> None:
        if self.line_open:
            self._end_line()

    def record(self, rec: msgspec.Struct, name: str) -> None:
        if self.line_open:
            self._end_line()
        frame = self.w.top
        frame.keys = key_predicates(rec)
        context: dict[str, Any] = {"r": rec}
        if self.opts.xpath:
            context["xk"] = escape.xml_attr(self.w.xpath(for_key=True, pretty=self.opts.pretty))
            context["xv"] = escape.xml_attr(self.w.xpath(for_key=False, pretty=self.opts.pretty))
        stream_template(compile_template(record_source, type(rec), self.opts), self.write, **context)


def record_source(cls: type[msgspec.Struct], opts: XoOptions) -> str:
    """jinja2 source of the HTML line of a record kind (the brief fields, keys first)."""
    nl = "\n" if opts.pretty else ""
    parts = ['<div class="line">' + nl, div("title", literal(escape.xml_text(kind_of(cls))), "", opts)]
    for item in brief_layout(cls):
        d = item.desc
        body = div("text", literal(escape.xml_text(item.sep)), "", opts)
        body += "".join(_piece(f, d, opts) for f in item.fields)
        parts.append(body if d.key else condition(d) + body + "{% endif %}")
    parts.append("</div>" + nl)
    return "".join(parts)


def _data_attrs(d: FieldDesc, f: Field, opts: XoOptions) -> str:
    attrs = f' data-tag="{f.content}"'
    if opts.units and d.unit:
        attrs += f' data-units="{escape.xml_attr(d.unit)}"'
    if opts.xpath:
        attrs += f' data-xpath="{{{{ {"xk" if d.key else "xv"} }}}}/{f.content}"'
    if opts.info:
        kind = getattr(d.type, "__name__", str(d.type))
        attrs += f' data-type="{escape.xml_attr(kind)}" data-help="{literal(escape.xml_attr(d.description))}"'
    if opts.keys and d.key:
        attrs += ' data-key="key"'
    return attrs


def _piece(f: Field, d: FieldDesc, opts: XoOptions) -> str:
    if f.role == "V":
        flt = ("html_host" if d.name in HOST_KEYS else "html_key") if d.key else "html"
        return div("data", f"{{{{ r.{d.name}|{flt}({f.fmt!r}) }}}}", _data_attrs(d, f, opts), opts)
    if f.role == "L":
        pad = div("padding", " ", "", opts) if "w" in f.mods else ""
        return div("label", literal(escape.xml_text(f.content)), "", opts) + pad
    if f.role == "U":
        pad = div("padding", " ", "", opts) if "w" in f.mods else ""
        return pad + ("" if opts.units else div("units", literal(escape.xml_text(f.content)), "", opts))
    raise AssertionError(f"unexpected role {f.role} in a record line")

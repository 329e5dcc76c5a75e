"""XML style: one element per value, containers and instances as elements, lists invisible.

No XML declaration and no root except the containers the program opens; compact output is
one line without a trailing newline, `pretty` indents 2 spaces per level. None values are
left out (libxo's NULL). Limits: no version attribute, no xo_attr(), no warn-xml.
Keep in sync with: ../shared/docs/libxo.md §4, §5.2, §7 and xo/records.py.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from translators.records import FieldDesc
from xo import escape
from xo.fields import Field, printf
from xo.options import XoOptions
from xo.records import compile_template, encoding_format, fields_of, kind_of, literal, stream_template, xo_name
from xo.styles.base import Renderer
from xo.writer import CONTAINER, INSTANCE, Frame

_NAME_OK = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")


def element_name(name: str) -> str:
    """A usable element name: libxo prefixes '_' to names not starting with a letter or '_';
    we also replace characters XML names cannot hold (record dict keys are data)."""
    if _NAME_OK.match(name):
        return name
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    return cleaned if _NAME_OK.match(cleaned) else "_" + cleaned


class XmlRenderer(Renderer):
    def __init__(self, writer: Any) -> None:
        super().__init__(writer)
        self.depth = 0
        self.nl = "\n" if self.opts.pretty else ""

    def ind(self, extra: int = 0) -> str:
        return " " * (self.opts.indent + 2 * (self.depth + extra)) if self.opts.pretty else ""

    def open(self, frame: Frame, parent: Frame) -> None:
        if frame.kind in (CONTAINER, INSTANCE):
            self.write(f"{self.ind()}<{self._name(frame.name)}>{self.nl}")
            self.depth += 1

    def close(self, frame: Frame, parent: Frame) -> None:
        if frame.kind in (CONTAINER, INSTANCE):
            self.depth -= 1
            self.write(f"{self.ind()}</{self._name(frame.name)}>{self.nl}")

    def _name(self, name: str) -> str:
        fixed = element_name(name)
        if fixed != name:
            self.w.diagnostic(f"bad XML name {name!r}, written as {fixed!r}")
        return fixed

    def leaf(self, name: str, text: str, attrs: str = "") -> None:
        tag = self._name(name)
        self.write(f"{self.ind()}<{tag}{attrs}>{escape.xml_text(text)}</{tag}>{self.nl}")

    def wrapped(self, outer: str, text: str) -> None:
        self.write(f"{self.ind()}<{outer}>{self.nl}")
        self.depth += 1
        self.leaf("message", text)
        self.depth -= 1
        self.write(f"{self.ind()}</{outer}>{self.nl}")

    def emit(self, items: list[tuple[Field, Any]]) -> None:
        for f, value in items:
            if f.role == "V" and "d" not in f.mods:
                self._value(f, value)
            elif f.role in ("E", "W"):
                self.wrapped("__error" if f.role == "E" else "__warning", printf(f.fmt, value))

    def _value(self, f: Field, value: Any) -> None:
        if value is None and f.efmt:
            return  # None is left out, like libxo's NULL
        text = printf(f.efmt, value) if f.efmt else ""
        if "t" in f.mods:
            text = text.strip()
        attrs = ' key="key"' if self.opts.keys and "k" in f.mods else ""
        if self.opts.units and f.units:
            attrs += f' units="{escape.xml_attr(f.units)}"'
        self.leaf(f.content, text, attrs)

    def error(self, message: str) -> None:
        self.wrapped("error", message)

    def message(self, message: str) -> None:
        self.leaf("message", message)

    def record(self, rec: msgspec.Struct, name: str) -> None:
        template = compile_template(record_source, type(rec), self.opts)
        stream_template(template, self.write, r=rec, i=self.ind())


def record_source(cls: type[msgspec.Struct], opts: XoOptions) -> str:
    """jinja2 source of every field of a record kind as XML elements (inside the instance)."""
    nl = "\n" if opts.pretty else ""
    descs = fields_of(cls)
    keys = [d for d in descs if d.key]
    rest = [d for d in descs if not d.key]
    out = [_field(d, "r", opts, nl, "") for d in keys]
    out.append(f"{{{{ i }}}}<kind>{literal(kind_of(cls))}</kind>{nl}")
    out += [_field(d, "r", opts, nl, "") for d in rest]
    return "".join(out)


def _attrs(d: FieldDesc, opts: XoOptions) -> str:
    attrs = ' key="key"' if opts.keys and d.key else ""
    if opts.units and d.unit:
        attrs += f' units="{escape.xml_attr(d.unit)}"'
    return attrs


def _field(d: FieldDesc, obj: str, opts: XoOptions, nl: str, pad: str) -> str:
    name = xo_name(d.name)
    ref = f"{obj}.{d.name}"
    open_tag, close_tag = f"{{{{ i }}}}{pad}<{name}{_attrs(d, opts)}>", f"</{name}>{nl}"
    step = "  " if opts.pretty else ""
    if d.type is list:
        item = d.item_type
        if isinstance(item, type) and issubclass(item, msgspec.Struct):  # one element per item (findings)
            from translators.records import describe

            inner = "".join(_field(sub, "v", opts, nl, pad + step) for sub in describe(item))
            return f"{{% for v in {ref} or () %}}{open_tag}{nl}{inner}{{{{ i }}}}{pad}{close_tag}{{% endfor %}}"
        if item is not None and getattr(item, "__origin__", None) is list:
            inner = f"{{{{ i }}}}{pad}{step}<value>{{{{ e|xml }}}}</value>{nl}"
            body = f"{open_tag}{nl}{{% for e in v %}}{inner}{{% endfor %}}{{{{ i }}}}{pad}{close_tag}"
        else:
            body = f"{open_tag}{{{{ v|xml }}}}{close_tag}"
        return f"{{% for v in {ref} or () %}}{body}{{% endfor %}}"
    if d.type is dict:
        leaf = f"{{{{ i }}}}{pad}{step}<{{{{ k|xml_name }}}}>{{{{ v|xml }}}}</{{{{ k|xml_name }}}}>{nl}"
        return (
            f"{{% if {ref} %}}{open_tag}{nl}{{% for k, v in {ref}.items() %}}{leaf}{{% endfor %}}"
            f"{{{{ i }}}}{pad}{close_tag}{{% endif %}}"
        )
    if isinstance(d.type, type) and issubclass(d.type, msgspec.Struct):
        from translators.records import describe

        inner = "".join(_field(sub, ref, opts, nl, pad + step) for sub in describe(d.type))
        return f"{{% if {ref} is not none %}}{open_tag}{nl}{inner}{{{{ i }}}}{pad}{close_tag}{{% endif %}}"
    efmt = encoding_format(d)
    value = f"{{{{ {ref}|xml_str }}}}" if d.type is str else f"{{{{ {ref}|xml({efmt!r}) }}}}"
    test = "present" if d.type is float else "not none"  # NaN/Inf are left out like None
    return f"{{% if {ref} is {test} %}}{open_tag}{value}{close_tag}{{% endif %}}"

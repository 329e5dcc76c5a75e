"""JSON style: containers are objects, lists arrays of instance objects, leaf-lists arrays.

The first item opens the top '{' and finish() closes it with exactly '}\\n' (no-top: no
wrapper; not-first: a leading comma for splicing). Quoting follows libxo: q -> string,
n -> bare, empty format -> true, one numeric conversion -> bare, otherwise a string; None,
NaN and Inf become null. Compact spacing copies libxo (', ' only around compound members).
Limits: no __version, no escape-slash, duplicate names are reported (warn), not merged.
Keep in sync with: ../shared/docs/libxo.md §4, §5.3, §7 and xo/records.py.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import msgspec

from translators.records import FieldDesc, describe
from xo import escape
from xo.fields import Field, finite, printf
from xo.options import XoOptions
from xo.records import encoding_format, fields_of, json_int, json_str, json_value, kind_of, xo_name
from xo.styles.base import Renderer
from xo.writer import CONTAINER, LIST, Frame


def json_name(name: str, opts: XoOptions) -> str:
    return escape.json_string(name.replace("-", "_") if opts.underscores else name)


def json_field_value(f: Field, value: Any) -> str:
    """libxo's quoting rules for one emitted value (libxo.md §5.3)."""
    if not f.efmt:
        return "true"
    if value is None or not finite(value):
        return "null"
    text = printf(f.efmt, value)
    if "t" in f.mods:
        text = text.strip()
    if "q" in f.mods:
        return escape.json_string(text)
    if "n" in f.mods or f.numeric:
        return text
    return escape.json_string(text)


class JsonRenderer(Renderer):
    def __init__(self, writer: Any) -> None:
        super().__init__(writer)
        self.started = False
        self.wrote = False
        self.pretty = self.opts.pretty
        if self.opts.not_first:
            writer.stack[0].children = 1

    def ind(self, level: int) -> str:
        return " " * (self.opts.indent + 2 * level)

    def member_level(self, frame: Frame) -> int:
        """Indent level of the members (or elements) written inside `frame`."""
        return frame.level + (0 if self.opts.no_top else 1)

    def _start(self) -> None:
        if not self.started:
            self.started = True
            if not self.opts.no_top:
                self.write("{")
                self.wrote = True

    def prefix(self, frame: Frame, compound: bool) -> None:
        """Comma and newline/indent before a new member or element of `frame`."""
        self._start()
        self.end_leaf_list(frame)
        if frame.children:
            self.write("," if self.pretty or not compound else ", ")
        if self.pretty and (self.wrote or frame.children):
            self.write("\n")
        if self.pretty:
            self.write(self.ind(self.member_level(frame)))
        self.wrote = True
        frame.children += 1

    def end_leaf_list(self, frame: Frame) -> None:
        if frame.leaf_list is not None:
            self.write("]")
            frame.leaf_list = None

    def _member_head(self, name: str, parent: Frame) -> str:
        return "" if parent.kind == LIST else json_name(name, self.opts) + ": "

    def open(self, frame: Frame, parent: Frame) -> None:
        self.prefix(parent, True)
        head = self._member_head(frame.name, parent)
        self.write(head + ("[" if frame.kind == LIST else "{"))

    def close(self, frame: Frame, parent: Frame) -> None:
        self.end_leaf_list(frame)
        closer = "]" if frame.kind == LIST else "}"
        if not frame.children:
            self.write(" " + closer if self.pretty else closer)
        elif self.pretty:
            self.write("\n" + self.ind(self.member_level(parent)) + closer)
        else:
            self.write(closer)

    def emit(self, items: list[tuple[Field, Any]]) -> None:
        frame = self.w.top
        sep = ": " if self.pretty else ":"
        for f, value in items:
            if f.role == "V" and "d" not in f.mods:
                text = json_field_value(f, value)
                if "l" in f.mods and frame.leaf_list == f.content:
                    self.write((", " if self.pretty else ",") + text)
                    continue
                self.prefix(frame, "l" in f.mods)
                if "l" in f.mods:
                    self.write(json_name(f.content, self.opts) + ": [" + text)
                    frame.leaf_list = f.content
                else:
                    self.write(json_name(f.content, self.opts) + sep + text)
            elif f.role in ("E", "W"):
                self._message_object("__error" if f.role == "E" else "__warning", printf(f.fmt, value))

    def _message_object(self, name: str, message: str) -> None:
        """`"name": {"message": "…"}` in the current object (E/W roles, xo_error)."""
        frame = self.w.top
        if frame.kind == LIST:  # a member cannot sit in an array: wrap it in an element
            self.prefix(frame, True)
            self.write("{")
            holder = Frame(CONTAINER, "", frame.level + 1)
            self._message_member(holder, name, message)
            self.close(holder, frame)
        else:
            self._message_member(frame, name, message)

    def _message_member(self, frame: Frame, name: str, message: str) -> None:
        inner = Frame(CONTAINER, name, frame.level + 1)
        self.prefix(frame, True)
        self.write(json_name(name, self.opts) + ": {")
        self.prefix(inner, False)
        self.write('"message"' + (": " if self.pretty else ":") + escape.json_string(message))
        self.close(inner, frame)

    def error(self, message: str) -> None:
        self._message_object("error", message)

    def message(self, message: str) -> None:
        """xo_message writes nothing in JSON (libxo.md §6)."""

    def record(self, rec: msgspec.Struct, name: str) -> None:
        frame = self.w.top
        self.write(record_writer(type(rec), self.opts)(rec, self.ind(self.member_level(frame))))
        frame.children = len(fields_of(type(rec))) + 1

    def finish(self) -> None:
        top = self.w.stack[0]
        if not self.started:
            return
        self.end_leaf_list(top)
        if self.opts.no_top:
            self.write("\n")
        else:
            self.write(("\n" + self.ind(0) if self.pretty else "") + "}\n")


# A record's members are written by plain functions built once per (record type, options)
# from the field descriptions: the same text a template would give, without loading and
# compiling jinja2 for a style whose record layout never varies (start-up, issue 17).
Part = Callable[[Any, str], str]  # (object holding the field, indent) -> one member


@functools.lru_cache(maxsize=512)
def record_writer(cls: type[msgspec.Struct], opts: XoOptions) -> Callable[[msgspec.Struct, str], str]:
    """-> write(record, indent): every field of a record kind as the members of its instance object."""
    descs = fields_of(cls)
    kind = escape.json_string(kind_of(cls))
    parts = [_part(d, opts, "") for d in descs if d.key]
    parts.append(lambda obj, i: _head("kind", opts, i, "") + kind)
    parts += [_part(d, opts, "") for d in descs if not d.key]
    return lambda rec, i: _join([part(rec, i) for part in parts], opts)


def _join(members: list[str], opts: XoOptions) -> str:
    if opts.pretty:
        return "\n" + ",\n".join(members)
    return ",".join(members)


def _head(name: str, opts: XoOptions, i: str, pad: str) -> str:
    sep = ": " if opts.pretty else ":"
    return (i + pad if opts.pretty else "") + json_name(name, opts) + sep


def _is_struct(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)


def _part(d: FieldDesc, opts: XoOptions, pad: str) -> Part:
    name, attr = xo_name(d.name), d.name
    nl = opts.pretty
    if _is_struct(d.type):  # a nested object (analysis counts)
        subs = [_part(sub, opts, pad + "  ") for sub in describe(d.type)]

        def nested(obj: Any, i: str) -> str:
            v = getattr(obj, attr)
            if v is None:
                return _head(name, opts, i, pad) + "null"
            close = ("\n" + i + pad if nl else "") + "}"
            return _head(name, opts, i, pad) + "{" + _join([sub(v, i) for sub in subs], opts) + close

        return nested
    if d.type is list and _is_struct(d.item_type):  # a list of objects (findings)
        items = [_part(sub, opts, pad + "    ") for sub in describe(d.item_type)]
        sep = "," if nl else ", "

        def objects(obj: Any, i: str) -> str:
            v = getattr(obj, attr)
            head = _head(name, opts, i, pad)
            if v is None:
                return head + "null"
            if not v:
                return head + "[]"
            edge = "\n" + i + pad + "  " if nl else ""
            body = sep.join(edge + "{" + _join([sub(e, i) for sub in items], opts) + edge + "}" for e in v)
            return head + "[" + body + ("\n" + i + pad if nl else "") + "]"

        return objects
    if d.type is int:
        return lambda obj, i: _head(name, opts, i, pad) + json_int(getattr(obj, attr))
    if d.type is str:
        return lambda obj, i: _head(name, opts, i, pad) + json_str(getattr(obj, attr))
    efmt = encoding_format(d)
    return lambda obj, i: _head(name, opts, i, pad) + json_value(getattr(obj, attr), efmt)

"""The xo Writer: one stream of open/close/emit/record/error calls, rendered by one style.

The Writer owns what every style shares: the stack of open containers, lists and
instances (names tracked for warn/dtrt, auto-closed by finish), key bookkeeping for
XPath predicates and the keys-first rule, value lookup for emit(), flushing. The style
renderers in xo/styles/ turn those events into text, XML, JSON or HTML and write each
piece to the stream as soon as it exists (bounded memory for any number of records).
Keep in sync with: ../shared/docs/libxo.md §4 and §6, the xo API in the nettrail brief
("Shared contracts"), and xo/styles/*.py.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

import msgspec

from xo.fields import Field, XoFormatError, parse_format, printf
from xo.options import XoOptions
from xo.records import xo_name
from xo.styles import make_renderer

CONTAINER, LIST, INSTANCE, TOP = "container", "list", "instance", "top"


@dataclass(eq=False)
class Frame:
    """One open container, list or instance (or the implicit top of the document)."""

    kind: str
    name: str
    level: int  # nesting depth in the encoding styles (indentation)
    children: int = 0  # members/elements written so far (JSON commas, close layout)
    keys: list[tuple[str, str]] = field(default_factory=list)  # (name, encoded value), for XPath
    seen_value: bool = False  # a non-key value was emitted (keys-first rule)
    leaves: set[str] = field(default_factory=set)  # leaf names written (duplicate warning)
    leaf_list: str | None = None  # JSON: the leaf-list array currently open in this object
    auto: bool = False  # a list opened by record(); closed by the next other call


class Writer:
    """Render libxo-style calls in one style to a text stream, as they happen."""

    def __init__(
        self,
        stream: TextIO,
        options: XoOptions | None = None,
        *,
        prog: str = "nettrail",
        errors: TextIO | None = None,
    ) -> None:
        self.stream = stream
        self.options = options or XoOptions()
        self.prog = prog
        self._errors = errors
        self.stack: list[Frame] = [Frame(TOP, "", 0)]
        self.info: dict[str, tuple[str, str]] = {}
        self.finished = False
        self.renderer = make_renderer(self)

    # --- output ---------------------------------------------------------------------------

    @property
    def errors(self) -> TextIO:
        return self._errors if self._errors is not None else sys.stderr

    def write(self, text: str) -> None:
        """Called by the renderers for every piece of output."""
        if not text:
            return
        self.stream.write(text)
        if self.options.flush or (self.options.flush_line and "\n" in text):
            self.stream.flush()

    def diagnostic(self, message: str) -> None:
        """API misuse, reported on stderr only with the `warn` flag (libxo.md §6)."""
        if self.options.warn:
            print(f"{self.prog}: {message}", file=self.errors)

    @property
    def top(self) -> Frame:
        return self.stack[-1]

    # --- hierarchy --------------------------------------------------------------------------

    def _open(self, kind: str, name: str) -> Frame:
        self._close_auto()
        self._check_name(name)
        frame = Frame(kind, name, self.top.level + 1)
        parent = self.top
        self.stack.append(frame)
        self.renderer.open(frame, parent)
        return frame

    def _close(self, kind: str, name: str | None) -> None:
        if self.top.auto and not (kind == LIST and name == self.top.name):
            self._close_auto()
        for depth in range(len(self.stack) - 1, 0, -1):
            frame = self.stack[depth]
            if frame.kind == kind and (name is None or frame.name == name):
                break
        else:
            self.diagnostic(f"close_{kind}({name!r}) without a matching open {kind}")
            return
        if depth != len(self.stack) - 1:
            top = self.top
            self.diagnostic(f"close_{kind}({name!r}) while {top.kind} {top.name!r} is open; closing it")
        while len(self.stack) > depth:
            self._pop()

    def _pop(self) -> None:
        frame = self.stack.pop()
        self.renderer.close(frame, self.top)
        if self.options.flush_line and frame.kind == INSTANCE:
            self.stream.flush()

    def _close_auto(self) -> None:
        if self.top.auto:
            self._pop()

    def _check_name(self, name: str) -> None:
        if not name:
            raise XoFormatError("containers, lists and instances need a name")

    def open_container(self, name: str) -> None:
        self._open(CONTAINER, name)

    def close_container(self, name: str | None = None) -> None:
        self._close(CONTAINER, name)

    def open_list(self, name: str) -> None:
        self._open(LIST, name)

    def close_list(self, name: str | None = None) -> None:
        self._close(LIST, name)

    def open_instance(self, name: str) -> None:
        if self.top.kind != LIST or self.top.name != name:
            self.diagnostic(f"open_instance({name!r}) outside list {name!r}")
        self._open(INSTANCE, name)

    def close_instance(self, name: str | None = None) -> None:
        self._close(INSTANCE, name)

    # --- content ----------------------------------------------------------------------------

    def emit(self, fmt: str, *args: Any, **values: Any) -> None:
        """Render one libxo format string; value fields take keyword arguments by name
        ('local-address' is looked up as local_address too), other arguments are positional."""
        self._close_auto()
        fields = parse_format(fmt)
        resolved = self._resolve(fields, args, values)
        self.renderer.emit(resolved)

    def _resolve(
        self, fields: tuple[Field, ...], args: tuple[Any, ...], values: Mapping[str, Any]
    ) -> list[tuple[Field, Any]]:
        out: list[tuple[Field, Any]] = []
        positional = iter(args)
        for f in fields:
            if f.role == "V":
                value = self._lookup(f, values, positional)
                if f.fmt or f.efmt:
                    self._track_key(f, value)
                out.append((f, value))
            elif f.has_format and not f.content:
                out.append((f, next(positional, None)))
            else:
                out.append((f, f.content))
        return out

    def _lookup(self, f: Field, values: Mapping[str, Any], positional: Iterable[Any]) -> Any:
        if not f.fmt and not f.efmt:
            return None  # empty format ({e:flag/}): no argument
        for key in (f.content, f.content.replace("-", "_")):
            if key in values:
                return values[key]
        sentinel = object()
        value = next(iter(positional), sentinel)
        if value is sentinel:
            raise XoFormatError(f"no value for field {f.content!r} (pass {f.content.replace('-', '_')}=...)")
        return value

    def _track_key(self, f: Field, value: Any) -> None:
        frame = self.top
        if "d" in f.mods:
            return
        if "k" in f.mods:
            if frame.seen_value:
                self.diagnostic(f"key field emitted after normal value field: {f.content!r}")
            if frame.kind == INSTANCE and value is not None:
                frame.keys.append((f.content, printf(f.efmt, value)))
        else:
            frame.seen_value = True
        if "l" not in f.mods:
            if f.content in frame.leaves:
                self.diagnostic(f"duplicate field {f.content!r} in {frame.kind} {frame.name!r}")
            frame.leaves.add(f.content)

    def record(self, rec: msgspec.Struct, name: str | None = None) -> None:
        """One record as an instance named `name` (default: its kind, '_' written '-').

        Opens the list of that name unless it is already the innermost open frame (as
        `name` or with hyphens); that list stays open for following records of the same
        name (one list per run) and closes at the next other call."""
        raw = name or str(getattr(rec, "kind", type(rec).__name__))
        inst = xo_name(raw)
        if self.top.kind == LIST and self.top.name in (raw, inst):
            inst = self.top.name  # the caller opened the list, spelled either way
        else:
            self._close_auto()
            frame = self._open(LIST, inst)
            frame.auto = True
        self._open_record_instance(inst)
        self.renderer.record(rec, inst)
        self._close(INSTANCE, inst)

    def _open_record_instance(self, name: str) -> None:
        frame = Frame(INSTANCE, name, self.top.level + 1)
        parent = self.top
        self.stack.append(frame)
        self.renderer.open(frame, parent)

    def error(self, message: str) -> None:
        """xo_error: stderr in text; an `error` element/member/div in the other styles."""
        self._close_auto()
        self.renderer.error(message)

    def warn(self, message: str) -> None:
        """xo_warn: always 'prog: message' on stderr, in every style."""
        print(f"{self.prog}: {message}", file=self.errors)

    def message(self, message: str) -> None:
        """xo_message: informational text; nothing in JSON (libxo.md §6)."""
        self._close_auto()
        self.renderer.message(message)

    def set_info(self, info: Mapping[str, tuple[str, str]]) -> None:
        """Field name -> (type, help) for HTML `info` (data-type / data-help)."""
        self.info.update(info)

    def flush(self) -> None:
        self.renderer.flush_pending()
        self.stream.flush()

    def finish(self) -> None:
        """Close everything still open and end the document (JSON: exactly '}\\n')."""
        if self.finished:
            return
        while len(self.stack) > 1:
            self._pop()
        self.renderer.finish()
        self.finished = True
        self.stream.flush()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()

    # --- helpers for renderers ----------------------------------------------------------------

    def xpath(self, *, for_key: bool, pretty: bool) -> str:
        """The XPath of the current position (containers and instances; lists skipped)."""
        parts: list[str] = []
        last = len(self.stack) - 1
        for depth, frame in enumerate(self.stack):
            if frame.kind in (TOP, LIST):
                continue
            parts.append("/" + frame.name)
            if frame.kind == INSTANCE and not (for_key and depth == last):
                parts.extend(predicate(k, v, pretty) for k, v in frame.keys)
        return "".join(parts)


def predicate(name: str, value: str, pretty: bool) -> str:
    quote = '"' if "'" in value else "'"
    eq = " = " if pretty else "="
    return f"[{name}{eq}{quote}{value}{quote}]"


def render_records(
    records: Iterable[msgspec.Struct],
    options: XoOptions,
    stream: TextIO,
    container: str = "nettrail",
    list_name: str | None = None,
) -> int:
    """Stream records into `container`: one list per contiguous run of a kind (or all in
    `list_name`). Pulls one record at a time from the iterable; returns the count."""
    count = 0
    with Writer(stream, options) as w:
        w.open_container(container)
        for rec in records:
            w.record(rec, list_name)
            count += 1
        w.close_container(container)
    return count

"""Record views: turn translators.records field descriptions into xo fields and jinja2 templates.

A record kind's display line (text/HTML) is a libxo format string generated from the
`brief` fields of describe(): key fields first ("{k:src}:{k:sport/%u} -> …"), then
"{Lw:name}{:name/FMT}{Uw:unit}" per brief field. The encoding styles (XML/JSON) carry every
field, typed by describe(). Each style module turns this one description into a jinja2
template, compiled once per (record type, options) and streamed with generate().
Keep in sync with: translators/records.py (describe, FieldDesc) and xo/styles/*.py.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from translators.records import FieldDesc, describe
from xo import escape
from xo.fields import Field, finite, parse_format, printf, strip_width
from xo.options import XoOptions

if TYPE_CHECKING:
    import jinja2

# Separators between consecutive key fields on the display line: "src:sport -> dst:dport".
KEY_SEPARATORS: dict[tuple[str, str], str] = {("src", "sport"): ":", ("sport", "dst"): " -> ", ("dst", "dport"): ":"}
# Addresses shown before ":port": IPv6 ones get brackets ([fe80::1]:443), as in URLs.
HOST_KEYS = frozenset(host for (host, _), sep in KEY_SEPARATORS.items() if sep == ":")


@dataclass(frozen=True)
class BriefItem:
    """One group of the display line: a key value, or label + value + units."""

    desc: FieldDesc
    sep: str  # literal text written before the group
    fields: tuple[Field, ...]  # the parsed libxo descriptors of the group


def display_format(d: FieldDesc) -> str:
    """printf format for text/HTML: the schema's fmt, 0x%x for hex fields, else by type."""
    if d.fmt:
        return d.fmt
    if d.hexa:
        return "0x%x"
    if d.type is int:
        return "%d"
    return "%s"


def encoding_format(d: FieldDesc) -> str | None:
    """printf format for XML/JSON (display width removed); None: use the type's own form."""
    return strip_width(d.fmt) if d.fmt else None


@functools.cache
def fields_of(cls: type[msgspec.Struct]) -> tuple[FieldDesc, ...]:
    """Fields in encoding order: key fields first (libxo's keys-first rule), then the rest."""
    descs = describe(cls)
    return tuple(d for d in descs if d.key) + tuple(d for d in descs if not d.key)


@functools.cache
def brief_layout(cls: type[msgspec.Struct]) -> tuple[BriefItem, ...]:
    descs = describe(cls)
    keys = [d for d in descs if d.key]
    items: list[BriefItem] = []
    prev = None
    for d in keys:
        sep = KEY_SEPARATORS.get((prev, d.name), " ") if prev else " "
        items.append(BriefItem(d, sep, parse_format(f"{{k:{xo_name(d.name)}/{display_format(d)}}}")))
        prev = d.name
    for d in descs:
        if d.brief and not d.key:
            units = f"{{Uw:{d.unit}}}" if d.unit else ""
            name = xo_name(d.name)
            items.append(BriefItem(d, " ", parse_format(f"{{Lw:{name}}}{{:{name}/{display_format(d)}}}{units}")))
    return tuple(items)


def brief_format(cls: type[msgspec.Struct]) -> str:
    """The whole display line as one libxo format string (documentation and tests)."""
    parts = [kind_of(cls)]
    for item in brief_layout(cls):
        parts.append(item.sep)
        parts.append("".join(_descriptor(f) for f in item.fields))
    return "".join(parts) + "\n"


def _descriptor(f: Field) -> str:
    mods = "".join(sorted(m for m in f.mods if len(m) == 1))
    role = "" if f.role == "V" else f.role
    fmt = "" if f.role != "V" else "/" + f.fmt
    return "{" + role + mods + ":" + f.content + fmt + "}"


def kind_of(cls: type[msgspec.Struct]) -> str:
    return str(cls.__struct_config__.tag or cls.__name__)


def xo_name(name: str) -> str:
    """Encoding name of a Python/record name: libxo writes names with hyphens."""
    return name.replace("_", "-")


# --- values, as the templates' filters see them -------------------------------------------------


def display_value(value: Any, fmt: str) -> str:
    """Text for humans: lists comma-joined, bools true/false, the field format applied."""
    if isinstance(value, list):
        # items that are sentences (findings) are separated like sentences
        sep = "; " if value and isinstance(value[0], msgspec.Struct) else ","
        return sep.join(display_value(v, "%s") for v in value)
    if isinstance(value, dict):
        return ",".join(f"{k}={display_value(v, '%s')}" for k, v in value.items())
    if isinstance(value, msgspec.Struct):
        message, severity = getattr(value, "message", None), getattr(value, "severity", None)
        if isinstance(message, str) and isinstance(severity, str):  # a finding: for people, its sentence
            return escape.text_safe(f"{severity}: {message}")
        return " ".join(f"{k}={display_value(v, '%s')}" for k, v in msgspec.structs.asdict(value).items())
    if isinstance(value, bytes):
        return value.hex()
    return escape.text_safe(printf(fmt, value))


def display_key(value: Any, fmt: str) -> str:
    return "*" if value is None else display_value(value, fmt)


def display_host(value: Any, fmt: str) -> str:
    text = display_key(value, fmt)
    return f"[{text}]" if ":" in text else text


def encode_scalar(value: Any, efmt: str | None) -> str | None:
    """The encoded text of a scalar; None for values the encodings leave out (None, NaN, Inf)."""
    if value is None or not finite(value):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")  # msgspec's wire form of bytes
    if efmt is not None:
        return printf(efmt, value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def json_value(value: Any, efmt: str | None = None) -> str:
    """A JSON value for any record field value (scalars, lists, dicts, nested Structs)."""
    if isinstance(value, str):
        return escape.json_string(value)
    if isinstance(value, bytes):
        return '"' + base64.b64encode(value).decode("ascii") + '"'
    if isinstance(value, list):
        return "[" + ", ".join(json_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{escape.json_string(str(k))}: {json_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, msgspec.Struct):
        return json_value(msgspec.structs.asdict(value))
    text = encode_scalar(value, efmt)
    return "null" if text is None else text


def xml_value(value: Any, efmt: str | None = None) -> str:
    text = encode_scalar(value, efmt) if not isinstance(value, str) else value
    return "" if text is None else escape.xml_text(text)


def json_int(value: Any) -> str:
    return "null" if value is None else str(int(value))


def json_str(value: Any) -> str:
    return "null" if value is None else escape.json_string(value)


FILTERS: dict[str, Callable[..., str]] = {
    "display": display_value,
    "display_key": display_key,
    "html": lambda value, fmt: escape.xml_text(display_value(value, fmt)),
    "html_key": lambda value, fmt: escape.xml_text(display_key(value, fmt)),
    "display_host": display_host,
    "html_host": lambda value, fmt: escape.xml_text(display_host(value, fmt)),
    "attr": escape.xml_attr,
    "json": json_value,
    "json_int": json_int,
    "json_str": json_str,
    "xml": xml_value,
    "xml_str": escape.xml_text,
    "xml_name": lambda name: _xml_name(str(name)),
}


def _xml_name(name: str) -> str:
    from xo.styles.xml import element_name

    return escape.xml_text(element_name(name))


@functools.cache
def environment() -> jinja2.Environment:
    """The jinja2 environment of the XML and HTML record templates, made on first use
    (JSON and text records need no template, and `nettrail analyze` starts faster)."""
    import jinja2

    # Escaping is explicit and per style (libxo.md §7), so jinja2's global autoescape stays off.
    env = jinja2.Environment(
        autoescape=False,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        auto_reload=False,
        cache_size=-1,
    )
    env.filters.update(FILTERS)
    # `is present`: a value the encodings carry (not None, not NaN/Inf).
    env.tests["present"] = lambda value: value is not None and finite(value)
    return env


def literal(text: str) -> str:
    """Template-safe literal text (names and labels could contain jinja2 syntax)."""
    if "{" in text or "}" in text or "%" in text or "#" in text:
        return "{{ " + repr(text) + " }}"
    return text


@functools.lru_cache(maxsize=512)
def compile_template(
    source_fn: Callable[[type[msgspec.Struct], XoOptions], str], cls: type[msgspec.Struct], opts: XoOptions
) -> jinja2.Template:
    """Compile a style's record template once per (style, record type, options)."""
    return environment().from_string(source_fn(cls, opts))


def stream_template(template: jinja2.Template, write: Callable[[str], None], **context: Any) -> None:
    """Render one record: generate() yields ~3 pieces per field; joining one record's pieces
    before writing keeps memory bounded by a record while cutting stream writes 100-fold."""
    chunks: Iterator[str] = template.generate(**context)
    write("".join(chunks))


def key_predicates(rec: msgspec.Struct) -> list[tuple[str, str]]:
    """(name, encoded value) of a record's key fields that have a value (XPath predicates)."""
    out = []
    for d in describe(type(rec)):
        if d.key:
            text = encode_scalar(getattr(rec, d.name), encoding_format(d))
            if text is not None:
                out.append((xo_name(d.name), text))
    return out

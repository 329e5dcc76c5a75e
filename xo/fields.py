"""The libxo field-descriptor parser and the printf-style value formatter, shared by all styles.

A format string such as "{k:src}:{k:sport/%u} {Lw:cwnd}{:cwnd/%u}{Uw:us}\\n" is parsed once
(cached, like libxo's "retain") into a tuple of `Field`s; literal text becomes role "text".
Keep in sync with: ../shared/docs/libxo.md §3 (roles, modifiers, format / encoding format)
and the renderers in xo/styles/, which interpret the parsed fields.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Any

ROLES = "VLNTPDUEWC"
MODIFIERS = "klqndehcwt"
ROLE_NAMES: dict[str, str] = {
    "value": "V",
    "label": "L",
    "note": "N",
    "title": "T",
    "padding": "P",
    "decoration": "D",
    "units": "U",
    "error": "E",
    "warning": "W",
    "color": "C",
}
MODIFIER_NAMES: dict[str, str] = {
    "key": "k",
    "leaf-list": "l",
    "quotes": "q",
    "no-quotes": "n",
    "display": "d",
    "encoding": "e",
    "humanize": "h",
    "hn": "h",
    "colon": "c",
    "white": "w",
    "trim": "t",
}
HUMANIZE_OPTIONS = ("hn-space", "hn-decimal", "hn-1000")

# One printf conversion: flags, min width, .precision, (ignored) length modifier, conversion.
_CONV = re.compile(r"%([-+ #0]*)(\d+|\*)?(?:\.(\d*|\*))?(hh|h|ll|l|j|z|t|q|L)?([diouxXDOUeEfFgGsc%mn])")
_NUMERIC = set("diouxXDOUeEfFgG")


class XoFormatError(ValueError):
    """A malformed format string or field descriptor (the calling code's bug)."""


@dataclass(frozen=True, slots=True)
class Field:
    """One parsed piece of a format string: literal text (role 'text') or a field descriptor."""

    role: str  # one of ROLES, or "text" for literal text between descriptors
    mods: frozenset[str]  # modifier letters, plus HUMANIZE_OPTIONS words
    content: str  # the field name (value roles) or the static text (other roles)
    fmt: str  # display format for text/HTML ("" = empty format: no value text)
    efmt: str  # encoding format for XML/JSON: fmt without minimum widths, unless given
    has_format: bool  # a '/format' was written (non-value roles then take an argument)
    units: str | None = None  # value roles: content of the following {U:} field, if any
    numeric: bool = False  # efmt is one numeric conversion: JSON writes it bare


@functools.lru_cache(maxsize=4096)
def parse_format(fmt: str) -> tuple[Field, ...]:
    """Split a libxo format string into literal text and field descriptors (cached)."""
    pieces: list[Field] = []
    text: list[str] = []
    i, n = 0, len(fmt)
    while i < n:
        ch = fmt[i]
        if ch == "{" and fmt.startswith("{{", i):
            text.append("{")
            i += 2
        elif ch == "}" and fmt.startswith("}}", i):
            text.append("}")
            i += 2
        elif ch == "{":
            end = _descriptor_end(fmt, i)
            if text:
                pieces.append(_text("".join(text)))
                text = []
            pieces.append(parse_descriptor(fmt[i + 1 : end]))
            i = end + 1
        elif ch == "}":
            raise XoFormatError(f"unbalanced '}}' at offset {i} in {fmt!r} (write '}}}}' for a literal brace)")
        else:
            text.append(ch)
            i += 1
    if text:
        pieces.append(_text("".join(text)))
    return _link_units(pieces)


def _text(s: str) -> Field:
    return Field("text", frozenset(), s, "", "", False)


def _descriptor_end(fmt: str, start: int) -> int:
    i = start + 1
    while i < len(fmt):
        if fmt[i] == "\\":
            i += 2
            continue
        if fmt[i] == "}":
            return i
        i += 1
    raise XoFormatError(f"unterminated field descriptor at offset {start} in {fmt!r}")


def _split_slashes(body: str) -> list[str]:
    # '\/' is a literal slash inside the content; unescaped '/' separate content/fmt/efmt.
    parts: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            cur.append(body[i + 1])
            i += 2
        elif body[i] == "/" and len(parts) < 2:
            parts.append("".join(cur))
            cur = []
            i += 1
        else:
            cur.append(body[i])
            i += 1
    parts.append("".join(cur))
    return parts


def parse_descriptor(body: str) -> Field:
    """Parse the inside of one '{...}': 'Lwc:Cost', 'k,quotes:name', ':srtt/%u', 'T:Name/%-20s'."""
    head, colon, rest = body.partition(":")
    if not colon:
        raise XoFormatError(f"field descriptor {{{body}}} has no ':' (write {{:{body}}} for a value)")
    role, mods = _parse_head(head, body)
    parts = _split_slashes(rest)
    content = parts[0]
    has_format = len(parts) > 1
    fmt = parts[1] if has_format else "%s"
    efmt = parts[2] if len(parts) > 2 else strip_width(fmt)
    if role == "V" and not content:
        raise XoFormatError(f"value field {{{body}}} has no name")
    for f in (fmt, efmt):
        _check_conversions(f, body)
    numeric = _is_numeric(efmt)
    if "t" in mods and role != "V":
        mods = mods - {"t"}
    return Field(role, frozenset(mods), content, fmt, efmt, has_format, None, numeric)


def _parse_head(head: str, body: str) -> tuple[str, set[str]]:
    letters, *longs = head.split(",")
    roles: list[str] = []
    mods: set[str] = set()
    for ch in letters:
        if ch in ROLES:
            roles.append(ch)
        elif ch in MODIFIERS:
            mods.add(ch)
        else:
            raise XoFormatError(
                f"unknown role or modifier {ch!r} in {{{body}}} (roles: {' '.join(ROLES)}; modifiers: {' '.join(MODIFIERS)})"
            )
    for word in longs:
        if word in ROLE_NAMES:
            roles.append(ROLE_NAMES[word])
        elif word in MODIFIER_NAMES:
            mods.add(MODIFIER_NAMES[word])
        elif word in HUMANIZE_OPTIONS:
            mods.update(("h", word))
        else:
            allowed = ", ".join([*ROLE_NAMES, *MODIFIER_NAMES, *HUMANIZE_OPTIONS])
            raise XoFormatError(f"unknown modifier {word!r} in {{{body}}} (allowed: {allowed})")
    if len(roles) > 1:
        raise XoFormatError(f"field {{{body}}} has more than one role: {''.join(roles)}")
    return (roles[0] if roles else "V"), mods


def _check_conversions(fmt: str, body: str) -> None:
    for m in _CONV.finditer(fmt):
        if m.group(5) == "n":
            raise XoFormatError(f"%n is refused in {{{body}}}")
        if m.group(5) == "m":
            raise XoFormatError(f"%m (strerror) is not supported in {{{body}}}: format the message yourself")
        if "*" in (m.group(2) or "") + (m.group(3) or ""):
            raise XoFormatError(f"'*' widths are not supported in {{{body}}}")


def strip_width(fmt: str) -> str:
    """Encoding format: drop minimum widths (padding), keep precision and zero-padding."""

    def repl(m: re.Match[str]) -> str:
        flags, width, prec = m.group(1), m.group(2), m.group(3)
        if "0" in flags and width:
            kept = flags.replace("-", "") + width  # leading zeros reach XML/JSON
        else:
            kept = flags.replace("-", "").replace("0", "")
        return "%" + kept + ("." + prec if prec is not None else "") + (m.group(4) or "") + m.group(5)

    return _CONV.sub(repl, fmt)


def _is_numeric(efmt: str) -> bool:
    m = _CONV.fullmatch(efmt)
    return m is not None and m.group(5) in _NUMERIC and "#" not in m.group(1)


def _link_units(pieces: list[Field]) -> tuple[Field, ...]:
    # A {U:} field gives the units of the preceding value; record it on the value so that
    # XML/HTML can write units="…"/data-units on the element they are writing already.
    out = list(pieces)
    last_value: int | None = None
    for i, f in enumerate(out):
        if f.role == "V":
            last_value = i
        elif f.role == "U" and last_value is not None:
            v = out[last_value]
            out[last_value] = Field(v.role, v.mods, v.content, v.fmt, v.efmt, v.has_format, f.content, v.numeric)
            last_value = None
    return tuple(out)


# --- printf ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _py_format(fmt: str) -> tuple[str, int]:
    # Python's % operator speaks printf minus the length modifiers and %D %O %U aliases.
    count = 0

    def repl(m: re.Match[str]) -> str:
        nonlocal count
        conv = m.group(5)
        if conv == "%":
            return "%%"
        count += 1
        conv = {"D": "d", "O": "o", "U": "u"}.get(conv, conv)
        prec = "." + m.group(3) if m.group(3) is not None else ""
        return "%" + m.group(1) + (m.group(2) or "") + prec + conv

    text = _CONV.sub(repl, fmt.replace("%%", "\0")).replace("\0", "%%")
    return text, count


def _prepare(value: Any, conv: str) -> Any:
    if value is None:
        return "null" if conv in "sc" else 0
    if isinstance(value, bool):
        return ("true" if value else "false") if conv in "sc" else int(value)
    if conv in "diouxX" and isinstance(value, float):
        return int(value)
    if conv == "s" and isinstance(value, float):
        return repr(value)
    return value


@functools.lru_cache(maxsize=4096)
def _conversions(fmt: str) -> str:
    return "".join(m.group(5) for m in _CONV.finditer(fmt) if m.group(5) != "%")


def printf(fmt: str, value: Any) -> str:
    """Format one argument (or a tuple for several conversions) with a libxo field format."""
    text, count = _py_format(fmt)
    if count == 0:
        return text % ()
    convs = _conversions(fmt)
    args = tuple(value) if count > 1 and isinstance(value, (tuple, list)) else (value,)
    if len(args) != count:
        raise XoFormatError(f"format {fmt!r} needs {count} values, got {len(args)}")
    try:
        return text % tuple(_prepare(a, c) for a, c in zip(args, convs, strict=True))
    except (TypeError, ValueError) as exc:
        raise XoFormatError(f"cannot format {value!r:.60} with {fmt!r}: {exc}") from None


def finite(value: Any) -> bool:
    """False for NaN and infinities, which JSON cannot carry (they become null)."""
    return not (isinstance(value, float) and not math.isfinite(value))


def humanize(value: Any, mods: frozenset[str]) -> str:
    """libxo {h:} display: 44M style, base 1024 (hn-1000: 1000), hn-decimal, hn-space."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    base = 1000.0 if "hn-1000" in mods else 1024.0
    suffixes = ("", "K", "M", "G", "T", "P", "E")
    scale = 0
    while abs(number) >= base and scale < len(suffixes) - 1:
        number /= base
        scale += 1
    space = " " if "hn-space" in mods and scale else ""
    if scale and "hn-decimal" in mods and abs(number) < 10:
        return f"{number:.1f}{space}{suffixes[scale]}"
    return f"{round(number):d}{space}{suffixes[scale]}"

"""Per-style escaping: XML/HTML text and attributes, JSON strings (libxo.md §7).

Each style escapes its own way, never one global autoescape: XML text escapes & < >,
attributes also ", control bytes below 0x20 (except tab, newline, carriage return)
become a space; JSON escapes " \\ and control bytes, drops NUL, writes other controls as
\\u00XX. Lone surrogates (from surrogateescape'd kernel strings) become U+FFFD so the
UTF-8 stream never fails. Keep in sync with: ../shared/docs/libxo.md §7.
"""

from __future__ import annotations

_CONTROLS = [c for c in range(0x20) if c not in (0x09, 0x0A, 0x0D)]
_SURROGATES = range(0xD800, 0xE000)

_XML_TEXT: dict[int, str] = {ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;"}
_XML_TEXT.update({c: " " for c in _CONTROLS})
_XML_TEXT.update({c: "\ufffd" for c in _SURROGATES})
# XML 1.0 forbids U+FFFE/U+FFFF even as references.
_XML_TEXT.update({0xFFFE: "\ufffd", 0xFFFF: "\ufffd"})
_XML_ATTR = dict(_XML_TEXT)
_XML_ATTR[ord('"')] = "&quot;"

_JSON: dict[int, str] = {c: f"\\u{c:04x}" for c in range(0x20)}
_JSON.update({0x00: "", 0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"})
_JSON.update({ord('"'): '\\"', ord("\\"): "\\\\"})
_JSON.update({c: "\ufffd" for c in _SURROGATES})


def xml_text(s: str) -> str:
    """Element (and HTML div) text."""
    return s.translate(_XML_TEXT)


def xml_attr(s: str) -> str:
    """Attribute values (XML attributes, HTML data-* attributes)."""
    return s.translate(_XML_ATTR)


def json_string(s: str) -> str:
    """A JSON string literal, quotes included."""
    return '"' + s.translate(_JSON) + '"'


def text_safe(s: str) -> str:
    """TEXT style does not escape; only lone surrogates are replaced so writing cannot fail."""
    return s.translate(_TEXT)


_TEXT: dict[int, str] = {c: "\ufffd" for c in _SURROGATES}

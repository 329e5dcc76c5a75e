"""Escaping: hostile strings (quotes, <, &, non-ASCII, NUL, control bytes, 100 kB) survive
every style, and the XML/JSON/HTML output parses with the standard library parsers.

Keep in sync with: xo/escape.py and ../shared/docs/libxo.md §7 (the rules asserted here).
"""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest
from record_samples import full_record

from translators.records import Alert, Record
from xo import Writer, parse_libxo, render_records

HOSTILE = "q\"uote' <tag> & amp; \x00nul \x01\x1f\x7f ctl \t tab\nnl\r cr é☃日本😀 /slash \\back"
LONG = "<&\"'" * 25_000 + "end"  # 100 kB of characters that all need escaping


def xml_expected(s: str) -> str:
    """XML text after escaping and parsing: controls become spaces, the parser turns CR into LF."""
    out = "".join(" " if ord(c) < 0x20 and c not in "\t\n\r" else c for c in s)
    return out.replace("\r\n", "\n").replace("\r", "\n")


def json_expected(s: str) -> str:
    return s.replace("\x00", "")


def html_expected(s: str) -> str:
    return "".join(" " if ord(c) < 0x20 and c not in "\t\n\r" else c for c in s)


def hostile_alert(text: str) -> Record:
    return full_record(
        Alert,
        comm=text,
        message=text,
        rule_id=text,
        approx=[text, "plain"],
        thresholds={text: text, "plain": 1},
    )


def render(rec: Record, spec: str) -> str:
    out = io.StringIO()
    render_records([rec], parse_libxo(spec), out)
    return out.getvalue()


class DataDivs(HTMLParser):
    """Collects (data-tag, attributes, text) of every data div."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.divs: list[tuple[str, dict[str, str | None], str]] = []
        self._open: list[tuple[str, dict[str, str | None]] | None] = []
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self._open.append((str(a.get("data-tag")), a) if a.get("class") == "data" else None)
        self._text = []

    def handle_data(self, data: str) -> None:
        self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        top = self._open.pop()
        if top is not None:
            self.divs.append((top[0], top[1], "".join(self._text)))
        self._text = []


@pytest.mark.parametrize("spec", ["xml", "xml,pretty,keys,units"])
@pytest.mark.parametrize("text", [HOSTILE, LONG], ids=["hostile", "100kB"])
def test_xml_parses_and_keeps_every_string_field(spec: str, text: str) -> None:
    root = ET.fromstring(render(hostile_alert(text), spec))
    alert = root.find("alert")
    assert alert is not None
    for name in ("comm", "message", "rule-id"):
        assert alert.findtext(name) == xml_expected(text)
    assert [e.text for e in alert.findall("approx")] == [xml_expected(text), "plain"]
    thresholds = alert.find("thresholds")
    assert thresholds is not None and [e.text for e in thresholds] == [xml_expected(text), "1"]
    if "keys" in spec:
        assert alert.find("rule-id").attrib == {"key": "key"}  # type: ignore[union-attr]


@pytest.mark.parametrize("spec", ["json", "json,pretty"])
@pytest.mark.parametrize("text", [HOSTILE, LONG], ids=["hostile", "100kB"])
def test_json_parses_and_keeps_every_string_field_except_nul(spec: str, text: str) -> None:
    doc = json.loads(render(hostile_alert(text), spec))
    (alert,) = doc["nettrail"]["alert"]
    for name in ("comm", "message", "rule-id"):
        assert alert[name] == json_expected(text)
    assert alert["approx"] == [json_expected(text), "plain"]
    assert alert["thresholds"] == {json_expected(text): json_expected(text), "plain": 1}


@pytest.mark.parametrize("spec", ["html", "html,pretty,xpath,keys,units,info"])
@pytest.mark.parametrize("text", [HOSTILE, LONG], ids=["hostile", "100kB"])
def test_html_parses_and_shows_the_brief_strings(spec: str, text: str) -> None:
    parser = DataDivs()
    parser.feed(render(hostile_alert(text), spec))
    parser.close()
    shown = {tag: body for tag, _, body in parser.divs}
    assert shown["comm"] == shown["message"] == shown["rule-id"] == html_expected(text)
    if "xpath" in spec:
        attrs = {tag: a for tag, a, _ in parser.divs}
        assert attrs["rule-id"]["data-xpath"] == "/nettrail/alert/rule-id"
        quote = '"' if "'" in text else "'"
        predicate = f"[rule-id = {quote}{html_expected(text)}{quote}]"
        assert attrs["message"]["data-xpath"] == "/nettrail/alert[src = '10.0.0.5'][sport = '44312']" + (
            f"[dst = '93.184.216.34'][dport = '443']{predicate}/message"
        )


def test_text_style_writes_strings_unescaped() -> None:
    out = render(hostile_alert('a <b> & "c"'), "text")
    assert ' message a <b> & "c"' in out


def test_lone_surrogates_become_replacement_characters_in_every_style() -> None:
    rec = hostile_alert("bad\udcffname")  # what surrogateescape makes of a non-UTF-8 comm
    for spec in ("text", "xml", "json", "html"):
        out = render(rec, spec)
        out.encode("utf-8")  # would raise on a surrogate
        assert "bad\ufffdname" in out or "bad\\ufffdname" in out


@pytest.mark.parametrize("style", ["xml", "json", "html"])
def test_emit_escapes_values_in_every_encoding(style: str) -> None:
    out = io.StringIO()
    w = Writer(out, parse_libxo(style))
    w.open_container("top")
    w.emit("{:value}{:other/%s}\n", value=HOSTILE, other="x&y")
    w.finish()
    text = out.getvalue()
    if style == "xml":
        root = ET.fromstring(text)
        assert root.findtext("value") == xml_expected(HOSTILE)
        assert root.findtext("other") == "x&y"
    elif style == "json":
        assert json.loads(text) == {"top": {"value": json_expected(HOSTILE), "other": "x&y"}}
    else:
        parser = DataDivs()
        parser.feed(text)
        assert [(t, b) for t, _, b in parser.divs] == [("value", html_expected(HOSTILE)), ("other", "x&y")]


def test_json_escapes_control_bytes_as_libxo_does() -> None:
    out = io.StringIO()
    with Writer(out, parse_libxo("json")) as w:
        w.emit("{:s}", s='"\\\b\f\n\r\t\x01\x1f\x00/')
    assert out.getvalue() == '{"s":"\\"\\\\\\b\\f\\n\\r\\t\\u0001\\u001f/"}\n'


def test_xml_escapes_attributes_with_quot() -> None:
    out = io.StringIO()
    with Writer(out, parse_libxo("xml,units")) as w:
        w.emit('{:v/%u}{U:a"<&>}', v=1)
    assert out.getvalue() == '<v units="a&quot;&lt;&amp;&gt;">1</v>'

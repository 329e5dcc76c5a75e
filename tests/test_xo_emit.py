"""Writer.emit and the hierarchy calls: descriptor parsing, roles, modifiers, quoting,
leaf-lists, humanize, warnings, auto-close, streaming, render_records grouping.

Keep in sync with: xo/fields.py, xo/writer.py, xo/styles/*.py, ../shared/docs/libxo.md §3-§6.
"""

from __future__ import annotations

import io
import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

import pytest
from record_samples import full_record

from translators.records import Alert, LossReport, TcpStateChange
from xo import Writer, XoFormatError, parse_format, parse_libxo, render_records
from xo.fields import strip_width


def emit(spec: str, fmt: str, *args: Any, container: str | None = None, **values: Any) -> str:
    out = io.StringIO()
    with Writer(out, parse_libxo(spec), errors=io.StringIO()) as w:
        if container:
            w.open_container(container)
        w.emit(fmt, *args, **values)
    return out.getvalue()


def run(spec: str, calls: Callable[[Writer], None]) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    w = Writer(out, parse_libxo(spec), errors=err, prog="prog")
    calls(w)
    w.finish()
    return out.getvalue(), err.getvalue()


# --- the descriptor parser ------------------------------------------------------------------


def test_letters_and_long_names_mean_the_same() -> None:
    assert parse_format("{Lwc:Cost}") == parse_format("{L,white,colon:Cost}")
    assert parse_format("{kq:name}") == parse_format("{k,quotes:name}")
    (f,) = parse_format("{Lwc:Cost}")
    assert (f.role, sorted(f.mods), f.content) == ("L", ["c", "w"], "Cost")


def test_double_braces_and_escaped_slashes_are_literal() -> None:
    pieces = parse_format("{{x}} {:a\\/b/%s}")
    assert [(p.role, p.content) for p in pieces] == [("text", "{x} "), ("V", "a/b")]


@pytest.mark.parametrize(
    ("fmt", "efmt"),
    [
        ("%-11s", "%s"),
        ("%7ju", "%ju"),
        ("%-3.3s%-2.2s", "%.3s%.2s"),
        ("%02d", "%02d"),
        ("%10.3f", "%.3f"),
        ("%4d.%02d", "%d.%02d"),
    ],
)
def test_the_encoding_format_drops_minimum_widths_only(fmt: str, efmt: str) -> None:
    assert strip_width(fmt) == efmt


def test_an_explicit_encoding_format_wins_and_parses_are_cached() -> None:
    (f,) = parse_format("{:protocol/%-3.3s%-2.2s/%s%s}")
    assert (f.fmt, f.efmt) == ("%-3.3s%-2.2s", "%s%s")
    assert parse_format("{:protocol/%-3.3s%-2.2s/%s%s}") is parse_format("{:protocol/%-3.3s%-2.2s/%s%s}")
    assert emit("text", "{:protocol/%-3.3s%-2.2s/%s%s}|", protocol=("tcp", "4")) == "tcp4 |"
    assert emit("json", "{:protocol/%-3.3s%-2.2s/%s%s}", protocol=("tcp", "4")) == '{"protocol":"tcp4"}\n'


@pytest.mark.parametrize(
    ("fmt", "fragment"),
    [
        ("{Q:x}", "unknown role or modifier 'Q'"),
        ("{,bogus:x}", "unknown modifier 'bogus'"),
        ("{:n/%n}", "%n is refused"),
        ("{x}", "has no ':'"),
        ("{:x", "unterminated"),
        ("a } b", "unbalanced"),
        ("{LN:x}", "more than one role"),
        ("{:}", "has no name"),
    ],
)
def test_malformed_descriptors_are_rejected_with_the_reason(fmt: str, fragment: str) -> None:
    with pytest.raises(XoFormatError, match=fragment):
        parse_format(fmt)


def test_a_missing_value_names_the_field() -> None:
    with pytest.raises(XoFormatError, match="no value for field 'local-port' \\(pass local_port=...\\)"):
        emit("text", "{:local-port/%u}")


# --- roles and modifiers ---------------------------------------------------------------------


def test_title_with_content_and_format_formats_the_content() -> None:
    assert emit("text", "{T:Name/%-8s}|{T:/%5s}|\n", "Arg") == "Name    |  Arg|\n"
    assert emit("json", "{T:Name/%-8s}{T:/%5s}", "Arg") == ""


def test_display_only_and_encoding_only_fields_split_humans_from_machines() -> None:
    fmt = "{d:target/%-16s}{e:address}{e:port/%u}|\n"
    values = {"target": "10.0.0.5.443", "address": "10.0.0.5", "port": 443}
    assert emit("text", fmt, **values) == "10.0.0.5.443    |\n"
    assert emit("xml", fmt, container="local", **values) == (
        "<local><address>10.0.0.5</address><port>443</port></local>"
    )
    assert json.loads(emit("json", fmt, container="local", **values)) == {"local": {"address": "10.0.0.5", "port": 443}}
    assert 'data-tag="address"' not in emit("html", fmt, **values)


@pytest.mark.parametrize(
    ("fmt", "value", "encoded"),
    [
        ("{q:v/%d}", 5, '"5"'),
        ("{n:v/%s}", "true", "true"),
        ("{:v/}", None, "true"),
        ("{:v/%d}", 5, "5"),
        ("{:v/%lu}", 5, "5"),
        ("{:v/%.2f}", 1.5, "1.50"),
        ("{:v/%s}", 5, '"5"'),
        ("{:v/0x%x}", 255, '"0xff"'),
        ("{:v/%#x}", 255, '"0xff"'),
        ("{:v/%4d.%02d}", (3, 7), '"   3.07"'.replace("   ", "")),
        ("{:v/%d}", None, "null"),
        ("{:v/%s}", None, "null"),
        ("{:v/%f}", math.nan, "null"),
        ("{:v/%g}", math.inf, "null"),
        ("{t:v}", "  padded  ", '"padded"'),
    ],
)
def test_json_quoting_follows_libxo(fmt: str, value: Any, encoded: str) -> None:
    assert emit("json", fmt, v=value) == '{"v":' + encoded + "}\n"


def test_xml_leaves_out_none_and_writes_empty_formats_as_empty_elements() -> None:
    assert emit("xml", "{:a/%s}{:b/%d}{e:flag/}", container="c", a=None, b=2) == "<c><b>2</b><flag></flag></c>"


def test_leaf_lists_become_json_arrays_and_repeated_xml_elements() -> None:
    def calls(w: Writer) -> None:
        w.open_container("host")
        for address in ("10.0.0.1", "fe80::1"):
            w.emit("{l:address}\n", address=address)
        w.emit("{:name}\n", name="a")

    assert json.loads(run("json", calls)[0]) == {"host": {"address": ["10.0.0.1", "fe80::1"], "name": "a"}}
    root = ET.fromstring(run("xml", calls)[0])
    assert [e.text for e in root.findall("address")] == ["10.0.0.1", "fe80::1"]
    assert run("json,pretty", calls)[0] == (
        '{\n  "host": {\n    "address": ["10.0.0.1", "fe80::1"],\n    "name": "a"\n  }\n}\n'
    )


def test_humanize_shows_short_numbers_to_humans_and_raw_ones_to_machines() -> None:
    assert emit(
        "text", "{h:bytes/%d}|{h,hn-decimal:b2/%d}|{h,hn-1000,hn-space:b3/%d}", bytes=46137344, b2=1536, b3=2000
    ) == ("44M|1.5K|2 K")
    assert emit("text,no-humanize", "{h:bytes/%d}", bytes=46137344) == "46137344"
    assert emit("json", "{h:bytes/%d}", bytes=46137344) == '{"bytes":46137344}\n'
    assert emit("html", "{h:bytes/%d}", bytes=46137344) == (
        '<div class="line"><div class="data" data-tag="bytes" data-number="46137344">44M</div></div>'
    )


def test_labels_notes_decorations_and_padding_in_text_and_html() -> None:
    fmt = "{Lc:Sent}{P:/%3s}{:sent/%u}{N:/ packets}{D:.}\n"
    assert emit("text", fmt, "", " packets", sent=7) == "Sent:   7 packets.\n"
    assert emit("html", fmt, "", " packets", sent=7) == (
        '<div class="line"><div class="label">Sent</div><div class="decoration">:</div>'
        '<div class="padding">   </div><div class="data" data-tag="sent">7</div>'
        '<div class="note"> packets</div><div class="decoration">.</div></div>'
    )
    assert emit("xml", fmt, "", " packets", sent=7) == "<sent>7</sent>"


def test_html_writes_a_blank_line_div_for_an_empty_line() -> None:
    assert emit("html,pretty", "\n{:a}\n", a="x") == (
        '<div class="blank-line"></div>\n<div class="line">\n  <div class="data" data-tag="a">x</div>\n</div>\n'
    )


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("text", "disk full\n"),
        ("xml", "<__error><message>disk full</message></__error><__warning><message>slow</message></__warning>"),
        ("json", '{"__error": {"message":"disk full"}, "__warning": {"message":"slow"}}\n'),
        ("html", '<div class="line"><div class="error">disk full</div><div class="warning">slow</div></div>'),
    ],
)
def test_error_and_warning_roles_are_written_in_place(spec: str, expected: str) -> None:
    out = emit(spec, "{E:/%s}{W:slow}", "disk full")
    assert out == (expected if spec != "text" else "disk fullslow")


def test_message_is_informational_and_absent_from_json() -> None:
    def calls(w: Writer) -> None:
        w.message("starting")

    assert run("text", calls)[0] == "starting\n"
    assert run("xml", calls)[0] == "<message>starting</message>"
    assert run("json", calls)[0] == ""
    assert run("html", calls)[0] == '<div class="line"><div class="message">starting</div></div>'


def test_warn_writes_prog_and_message_to_stderr_in_every_style() -> None:
    for spec in ("text", "xml", "json", "html"):
        out, err = run(spec, lambda w: w.warn("cannot open /sys/x"))
        assert (out, err) == ("", "prog: cannot open /sys/x\n")


# --- hierarchy, warnings, finish --------------------------------------------------------------


def test_the_warn_flag_reports_api_misuse_and_silence_is_the_default() -> None:
    def calls(w: Writer) -> None:
        w.open_container("top")
        w.open_list("item")
        w.open_instance("item")
        w.emit("{:name} {k:id/%u} {:name}\n", name="a", id=1)
        w.close_instance("item")
        w.close_list("wrong")
        w.close_container("top")

    _, err = run("xml,warn", calls)
    assert err.splitlines() == [
        "prog: key field emitted after normal value field: 'id'",
        "prog: duplicate field 'name' in instance 'item'",
        "prog: close_list('wrong') without a matching open list",
        "prog: close_container('top') while list 'item' is open; closing it",
    ]
    assert run("xml", calls)[1] == ""


def test_closing_an_outer_frame_closes_the_inner_ones_and_warns() -> None:
    def calls(w: Writer) -> None:
        w.open_container("a")
        w.open_container("b")
        w.close_container("a")
        w.emit("{:after}", after=1)

    out, err = run("xml,warn", calls)
    assert out == "<a><b></b></a><after>1</after>"
    assert err == "prog: close_container('a') while container 'b' is open; closing it\n"


def test_dtrt_closes_may_omit_the_name() -> None:
    def calls(w: Writer) -> None:
        w.open_container("a")
        w.open_list("x")
        w.open_instance("x")
        w.emit("{:v/%d}", v=1)
        w.close_instance()
        w.close_list()
        w.close_container()

    assert run("json,dtrt", calls)[0] == '{"a": {"x": [{"v":1}]}}\n'


def test_finish_closes_everything_and_json_ends_with_exactly_one_brace_and_newline() -> None:
    def calls(w: Writer) -> None:
        w.open_container("a")
        w.open_list("x")
        w.open_instance("x")
        w.emit("{:v/%d}", v=1)

    for spec in ("json", "json,pretty"):
        out = run(spec, calls)[0]
        assert out.endswith("}\n") and not out.endswith("\n}\n\n") and json.loads(out) == {"a": {"x": [{"v": 1}]}}
    assert run("xml", calls)[0] == "<a><x><v>1</v></x></a>"


def test_empty_lists_are_brackets_in_json_and_absent_in_xml() -> None:
    def calls(w: Writer) -> None:
        w.open_container("a")
        w.open_list("x")
        w.close_list("x")

    assert run("json,pretty", calls)[0] == '{\n  "a": {\n    "x": [ ]\n  }\n}\n'
    assert run("json", calls)[0] == '{"a": {"x": []}}\n'
    assert run("xml", calls)[0] == "<a></a>"


def test_no_top_and_not_first_let_runs_be_spliced() -> None:
    def calls(w: Writer) -> None:
        w.emit("{:v/%d}", v=1)

    assert run("json,no-top", calls)[0] == '"v":1\n'
    assert run("json,no-top,not-first", calls)[0] == ',"v":1\n'
    assert run("json,not-first", calls)[0] == '{,"v":1}\n'


def test_names_that_are_not_xml_names_get_an_underscore_prefix() -> None:
    out, err = run("xml,warn", lambda w: w.emit("{:1st/%d}", **{"1st": 1}))
    assert out == "<_1st>1</_1st>"
    assert err == "prog: bad XML name '1st', written as '_1st'\n"


def test_indent_sets_the_base_indent_of_pretty_output() -> None:
    out = emit("xml,pretty,indent=4", "{:v/%d}", container="c", v=1)
    assert out == "    <c>\n      <v>1</v>\n    </c>\n"


# --- streaming and records -------------------------------------------------------------------


class FlushCounter(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.flushed_at: list[int] = []

    def flush(self) -> None:
        self.flushed_at.append(len(self.getvalue()))


def test_output_reaches_the_stream_as_each_record_is_rendered() -> None:
    out = FlushCounter()
    w = Writer(out, parse_libxo("json,flush-line,pretty"))
    w.open_container("nettrail")
    w.record(full_record(TcpStateChange))
    first = out.getvalue()
    assert '"kind": "tcp_state"' in first and first.endswith("}")
    w.record(full_record(TcpStateChange, seq=2))
    assert out.getvalue().startswith(first) and '"seq": 2' in out.getvalue()
    assert len(out.flushed_at) >= 2  # flush-line flushes while records flow, not only at the end
    w.finish()
    assert json.loads(out.getvalue())["nettrail"]["tcp-state"][1]["seq"] == 2


def test_flush_line_flushes_text_at_every_newline() -> None:
    out = FlushCounter()
    w = Writer(out, parse_libxo("text,flush-line"))
    w.emit("{:a}", a="x")
    assert out.flushed_at == []
    w.emit("{:b}\n", b="y")
    assert out.flushed_at == [3]


def test_render_records_makes_one_list_per_run_of_a_kind() -> None:
    state = full_record(TcpStateChange)
    loss = full_record(LossReport)
    out = io.StringIO()
    count = render_records(iter([state, state, loss, state]), parse_libxo("xml"), out)
    root = ET.fromstring(out.getvalue())
    assert count == 4
    assert [child.tag for child in root] == ["tcp-state", "tcp-state", "loss-report", "tcp-state"]
    out = io.StringIO()
    render_records([state, loss], parse_libxo("json"), out, container="trace", list_name="record")
    doc = json.loads(out.getvalue())
    assert [r["kind"] for r in doc["trace"]["record"]] == ["tcp_state", "loss_report"]


def test_record_puts_key_fields_first_and_names_the_instance() -> None:
    out = io.StringIO()
    with Writer(out, parse_libxo("json")) as w:
        w.record(full_record(Alert), name="alarm")
    (alarm,) = json.loads(out.getvalue())["alarm"]
    assert list(alarm)[:6] == ["src", "sport", "dst", "dport", "rule-id", "kind"]


def test_record_lines_show_hex_fields_units_and_formats() -> None:
    out = io.StringIO()
    with Writer(out, parse_libxo("text")) as w:
        w.record(full_record(LossReport))
        w.emit("{:done}\n", done="ok")
    assert out.getvalue().splitlines() == [
        "TIME                         PROBE    EVENT-TYPE  LOST  LOST-TOTAL",
        "2025-11-29T08:00:00.123456Z  ringbuf  tcp_probe     12         340",
        "    process curl[31337]",
        "",  # a blank line between the table and what follows it
        "ok",
    ]


def test_an_error_inside_a_list_becomes_an_element_so_json_stays_valid() -> None:
    def calls(w: Writer) -> None:
        w.open_container("c")
        w.open_list("x")
        w.error("boom")
        w.open_instance("x")
        w.emit("{:v/%d}", v=1)

    assert json.loads(run("json", calls)[0]) == {"c": {"x": [{"error": {"message": "boom"}}, {"v": 1}]}}
    assert json.loads(run("json,pretty", calls)[0]) == {"c": {"x": [{"error": {"message": "boom"}}, {"v": 1}]}}


def test_nan_and_infinity_never_reach_the_encodings() -> None:
    rec = full_record(Alert, metric=math.nan, end=math.inf)
    out = io.StringIO()
    render_records([rec], parse_libxo("json"), out)
    (alert,) = json.loads(out.getvalue())["nettrail"]["alert"]
    assert (alert["metric"], alert["end"]) == (None, None)
    out = io.StringIO()
    render_records([rec], parse_libxo("xml"), out)
    root = ET.fromstring(out.getvalue())
    assert root.find("alert/metric") is None and root.find("alert/end") is None
    assert root.findtext("alert/start") == "1764403190.500000"


def test_ipv6_addresses_get_brackets_before_the_port_on_the_display_line() -> None:
    rec = full_record(TcpStateChange, src="fe80::1", dst="2001:db8::5", ip_ver=6)
    out = io.StringIO()
    render_records([rec], parse_libxo("text"), out)
    assert out.getvalue().splitlines()[1] == (
        "2025-11-29T08:00:00.123456Z  state-change  [fe80::1]:44312  [2001:db8::5]:443  SYN_SENT    ESTABLISHED"
    )
    out = io.StringIO()
    render_records([rec], parse_libxo("html"), out)
    assert '<div class="data" data-tag="src">[fe80::1]</div>' in out.getvalue()
    out = io.StringIO()
    render_records([rec], parse_libxo("json"), out)
    assert json.loads(out.getvalue())["nettrail"]["tcp-state"][0]["src"] == "fe80::1"


def test_info_adds_type_and_help_from_the_registered_table_in_html() -> None:
    def calls(w: Writer) -> None:
        w.set_info({"srtt": ("int", "smoothed RTT")})
        w.emit("{:srtt/%u}{:other}", srtt=2310, other="x")

    assert run("html,info", calls)[0] == (
        '<div class="line"><div class="data" data-tag="srtt" data-type="int" data-help="smoothed RTT">2310</div>'
        '<div class="data" data-tag="other">x</div></div>'
    )
    assert "data-type" not in run("html", calls)[0]


def test_record_reuses_a_list_the_caller_opened_with_either_spelling() -> None:
    def calls(w: Writer) -> None:
        w.open_container("trace")
        w.open_list("tcp_state")
        w.record(full_record(TcpStateChange), name="tcp_state")
        w.record(full_record(TcpStateChange, seq=2))
        w.close_list("tcp_state")

    doc = json.loads(run("json", calls)[0])
    assert list(doc["trace"]) == ["tcp_state"]
    assert [r["seq"] for r in doc["trace"]["tcp_state"]] == [4242, 2]

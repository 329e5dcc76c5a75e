"""The worked example of libxo.md §9, reproduced byte for byte through Writer.emit().

Keep in sync with: ../shared/docs/libxo.md §9 (the expected outputs are copied from it).
"""

from __future__ import annotations

import io
import json

import pytest

from xo import Writer, parse_libxo

FORMAT = (
    "{k:local-address}:{k:local-port/%u} -> {k:remote-address}:{k:remote-port/%u} "
    "{:state/%-11s} {Lw:cwnd}{:cwnd/%u} {Lw:srtt}{:srtt/%u}{Uw:us}\n"
)
CONNECTIONS = [
    ("10.0.0.5", 44312, "93.184.216.34", 443, "ESTABLISHED", 10, 2310),
    ("10.0.0.5", 51022, "10.0.0.9", 5432, "CLOSE_WAIT", 4, 180),
]

TEXT = """\
10.0.0.5:44312 -> 93.184.216.34:443 ESTABLISHED cwnd 10 srtt 2310 us
10.0.0.5:51022 -> 10.0.0.9:5432 CLOSE_WAIT  cwnd 4 srtt 180 us
"""

XML_PRETTY = """\
<tcp-trace>
  <connection>
    <local-address>10.0.0.5</local-address>
    <local-port>44312</local-port>
    <remote-address>93.184.216.34</remote-address>
    <remote-port>443</remote-port>
    <state>ESTABLISHED</state>
    <cwnd>10</cwnd>
    <srtt>2310</srtt>
  </connection>
  <connection>
    <local-address>10.0.0.5</local-address>
    <local-port>51022</local-port>
    <remote-address>10.0.0.9</remote-address>
    <remote-port>5432</remote-port>
    <state>CLOSE_WAIT</state>
    <cwnd>4</cwnd>
    <srtt>180</srtt>
  </connection>
</tcp-trace>
"""

JSON_PRETTY = """\
{
  "tcp-trace": {
    "connection": [
      {
        "local-address": "10.0.0.5",
        "local-port": 44312,
        "remote-address": "93.184.216.34",
        "remote-port": 443,
        "state": "ESTABLISHED",
        "cwnd": 10,
        "srtt": 2310
      },
      {
        "local-address": "10.0.0.5",
        "local-port": 51022,
        "remote-address": "10.0.0.9",
        "remote-port": 5432,
        "state": "CLOSE_WAIT",
        "cwnd": 4,
        "srtt": 180
      }
    ]
  }
}
"""

HTML_LINE = """\
<div class="line">
  <div class="data" data-tag="local-address">{0}</div>
  <div class="text">:</div>
  <div class="data" data-tag="local-port">{1}</div>
  <div class="text"> -&gt; </div>
  <div class="data" data-tag="remote-address">{2}</div>
  <div class="text">:</div>
  <div class="data" data-tag="remote-port">{3}</div>
  <div class="text"> </div>
  <div class="data" data-tag="state">{4}</div>
  <div class="text"> </div>
  <div class="label">cwnd</div>
  <div class="padding"> </div>
  <div class="data" data-tag="cwnd">{5}</div>
  <div class="text"> </div>
  <div class="label">srtt</div>
  <div class="padding"> </div>
  <div class="data" data-tag="srtt">{6}</div>
  <div class="padding"> </div>
  <div class="units">us</div>
</div>
"""
# §9 prints the first record and says the second "is the same shape"; the display width
# of %-11s pads CLOSE_WAIT inside its div.
HTML_PRETTY = HTML_LINE.format(*CONNECTIONS[0]) + HTML_LINE.format(*CONNECTIONS[1][:4], "CLOSE_WAIT ", 4, 180)


def run(spec: str) -> str:
    out = io.StringIO()
    w = Writer(out, parse_libxo(spec))
    w.open_container("tcp-trace")
    w.open_list("connection")
    for la, lp, ra, rp, state, cwnd, srtt in CONNECTIONS:
        w.open_instance("connection")
        w.emit(
            FORMAT,
            local_address=la,
            local_port=lp,
            remote_address=ra,
            remote_port=rp,
            state=state,
            cwnd=cwnd,
            srtt=srtt,
        )
        w.close_instance("connection")
    w.close_list("connection")
    w.close_container("tcp-trace")
    w.finish()
    return out.getvalue()


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("text", TEXT), ("xml,pretty", XML_PRETTY), ("json,pretty", JSON_PRETTY), ("html,pretty", HTML_PRETTY)],
)
def test_it_reproduces_the_worked_example_byte_for_byte(spec: str, expected: str) -> None:
    assert run(spec) == expected


def test_compact_json_is_the_one_line_form_of_the_example() -> None:
    out = run("json")
    assert out.startswith('{"tcp-trace": {"connection": [{"local-address":"10.0.0.5","local-port":44312,')
    assert '"srtt":2310}, {"local-address":"10.0.0.5",' in out
    assert out.endswith('"srtt":180}]}}\n')
    assert json.loads(out) == json.loads(JSON_PRETTY)


def test_underscores_rewrite_member_names() -> None:
    doc = json.loads(run("json,underscores"))
    assert list(doc["tcp_trace"]["connection"][0]) == [
        "local_address", "local_port", "remote_address", "remote_port", "state", "cwnd", "srtt",
    ]  # fmt: skip


def test_keys_and_units_add_the_attributes_the_example_shows() -> None:
    out = run("xml,pretty,keys,units")
    assert '    <local-address key="key">10.0.0.5</local-address>\n' in out
    assert '    <srtt units="us">2310</srtt>\n' in out
    assert out.count('key="key"') == 8
    assert "<state>ESTABLISHED</state>" in out


def test_html_xpath_keys_units_match_the_example_divs() -> None:
    out = run("html,pretty,xpath,keys,units")
    assert (
        '  <div class="data" data-tag="local-port" data-xpath="/tcp-trace/connection/local-port"'
        ' data-key="key">44312</div>\n' in out
    )
    assert (
        '  <div class="data" data-tag="srtt" data-units="us" data-xpath="/tcp-trace/connection'
        "[local-address = '10.0.0.5'][local-port = '44312'][remote-address = '93.184.216.34']"
        '[remote-port = \'443\']/srtt">2310</div>\n  <div class="padding"> </div>\n</div>\n' in out
    )
    assert '<div class="units">' not in out


def test_compact_xpath_predicates_have_no_spaces() -> None:
    assert "[local-address='10.0.0.5'][local-port='44312']" in run("html,xpath")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("xml", "<error><message>ring buffer overrun: 12 events lost</message></error>"),
        ("json", '{"error": {"message":"ring buffer overrun: 12 events lost"}}\n'),
        ("html", '<div class="line"><div class="error">ring buffer overrun: 12 events lost</div></div>'),
    ],
)
def test_an_error_in_the_stream_is_written_in_place(spec: str, expected: str) -> None:
    out = io.StringIO()
    with Writer(out, parse_libxo(spec)) as w:
        w.error(f"ring buffer overrun: {12} events lost")
    assert out.getvalue() == expected


def test_an_error_in_text_style_goes_to_stderr() -> None:
    out, err = io.StringIO(), io.StringIO()
    with Writer(out, parse_libxo("text"), errors=err) as w:
        w.error("ring buffer overrun: 12 events lost")
    assert (out.getvalue(), err.getvalue()) == ("", "ring buffer overrun: 12 events lost\n")

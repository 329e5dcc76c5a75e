"""The text style for people: aligned tables, ISO 8601 UTC or relative times, humanised units.

Golden files of `nettrail analyze` on one capture of several connection kinds
(tests/capture_mix.py) in the text style, with --relative and with no-humanize, compared
byte for byte with tests/golden/text/. Regenerate after an intended change, then review:

    NETTRAIL_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/test_xo_text_tables.py

The per-record goldens of every kind are in tests/golden/xo/*.text.out (test_xo_golden.py,
same switch). The other tests pin the table mechanics: widths, the header written again
when a later row is wider, rows wrapping their details, streaming with flush-line.
Keep in sync with: xo/styles/table.py, xo/styles/text.py, xo/human.py, docs/output.md.
"""

from __future__ import annotations

import dataclasses
import io
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from record_samples import full_record

from tests.capture_mix import build
from translators.records import Alert, Connection, TcpStateChange
from xo import Writer, XoOptions, human, parse_libxo, render_records
from xo.styles import table

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "golden" / "text"
REGEN = os.environ.get("NETTRAIL_REGEN_GOLDEN") == "1"
VARIANTS = {
    "analyze-mix.text.out": [],
    "analyze-mix.relative.out": ["--relative"],
    "analyze-mix.no-humanize.out": ["--libxo", "text,no-humanize"],
}


@pytest.mark.parametrize("name", VARIANTS)
def test_analyze_text_output_is_the_golden_file(tmp_path: Path, name: str) -> None:
    build(tmp_path / "mix.pcap")
    proc = subprocess.run(
        [sys.executable, "-m", "nettrail.cli", "analyze", "mix.pcap", *VARIANTS[name]],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    path = GOLDEN / name
    if REGEN:
        path.write_text(proc.stdout, encoding="utf-8")
    assert proc.stdout == path.read_text(encoding="utf-8"), f"{name} differs; regenerate if the change is intended"


def test_the_connection_table_has_the_documented_columns_in_order() -> None:
    text = (GOLDEN / "analyze-mix.text.out").read_text(encoding="utf-8")
    header = next(line for line in text.splitlines() if line.startswith("PROTO"))
    assert header.split() == [
        "PROTO", "LOCAL/ORIG", "REMOTE/RESP", "STATE", "PKTS>", "BYTES>", "PKTS<", "BYTES<", "DURATION", "RETX",
        "FINDINGS",
    ]  # fmt: skip
    rows = [line for line in text.splitlines() if line.startswith(("tcp ", "udp "))]
    assert [r.split()[3] for r in rows] == ["SF", "REJ", "RSTR", "SF"]
    # every cell of a column starts (left-aligned) or ends (right-aligned) where its header does
    assert {r.index(r.split()[3]) for r in rows} == {header.index("STATE")}
    assert {len(r[: header.index("PKTS>") + len("PKTS>")].rstrip()) for r in rows} == {
        header.index("PKTS>") + len("PKTS>")
    }


def test_times_are_iso_8601_utc_or_relative_to_the_first_time_shown() -> None:
    assert human.iso_time(1764403200.123456) == "2025-11-29T08:00:00.123456Z"
    assert human.iso_time(0.0) == "1970-01-01T00:00:00.000000Z"
    clock = table.Clock(parse_libxo("text"))
    assert clock.time(1764403200.5) == "2025-11-29T08:00:00.500000Z"
    rel = table.Clock(with_relative("text"))
    assert [rel.time(t) for t in (100.25, 101.0, 99.0)] == ["+0.000000 s", "+0.750000 s", "-1.250000 s"]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0 s"), (37e-6, "37 us"), (0.0123, "12.3 ms"), (0.5, "500 ms"), (9.623456, "9.62 s"), (59.94, "59.9 s"),
     (184, "3 min 04 s"), (7380, "2 h 03 min"), (90000, "1 d 01 h"), (-0.002, "-2 ms")],
)  # fmt: skip
def test_durations_get_a_unit_that_fits(seconds: float, text: str) -> None:
    assert human.duration(seconds) == text


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (10 * 1024, "10 KiB"),
     (1048576, "1.0 MiB"), (5 * 1024**3, "5.0 GiB")],
)  # fmt: skip
def test_byte_counts_are_humanised_in_powers_of_1024(n: int, text: str) -> None:
    assert human.byte_count(n) == text


def render(records: list[msgspec.Struct], spec: str = "text") -> str:
    out = io.StringIO()
    render_records(records, parse_libxo(spec), out)
    return out.getvalue()


def test_a_wider_row_after_the_first_chunk_widens_its_column_under_a_new_header() -> None:
    base = full_record(TcpStateChange)
    records = [msgspec.structs.replace(base, seq=i, pid=None, comm=None) for i in range(table.CHUNK_ROWS)]
    records.append(msgspec.structs.replace(base, seq=99, pid=None, comm=None, src="2001:db8::1234:5678"))
    lines = render(records).splitlines()
    headers = [i for i, line in enumerate(lines) if line.startswith("TIME")]
    assert headers == [0, table.CHUNK_ROWS + 1]  # the first chunk's rows, then the header again
    assert lines[1].split()[2] == "10.0.0.5:44312"
    assert lines[-1].split()[2] == "[2001:db8::1234:5678]:44312"
    assert lines[-2].index("DST") == lines[-1].index("93.184.216.34:443")
    assert lines[0].index("DST") < lines[-2].index("DST")


def test_a_long_message_wraps_under_its_row_at_the_output_width() -> None:
    message = " ".join(["retransmissions"] * 20)
    [header, row, *details] = render([full_record(Alert, message=message)]).splitlines()
    assert header.split() == ["TIME", "PROBE", "SRC", "DST", "RULE-ID", "CONDITION", "SEVERITY", "COUNT"]
    assert row.split()[4:] == ["K1", "condition-sample", "warning", "12"]
    assert all(line.startswith("    ") and len(line) <= table.DEFAULT_WIDTH for line in details)
    words = " ".join(line.strip() for line in details).split()
    assert words == ["message", *message.split(), "process", "curl[31337]"]
    assert len(details) == 5  # the message on four lines, the process on the fifth


def test_kinds_change_tables_and_each_table_is_separated_by_a_blank_line() -> None:
    a, b = full_record(TcpStateChange), full_record(Connection, findings=[])
    lines = render([a, a, b, a]).splitlines()
    # header, row, process, row, process | header, row, start/history/icmp, process | header, ...
    assert [i for i, line in enumerate(lines) if line == ""] == [5, 10]
    assert [lines[i].split()[0] for i in (0, 6, 11)] == ["TIME", "PROTO", "TIME"]


def test_flush_line_writes_each_row_as_it_comes() -> None:
    out = io.StringIO()
    rec = full_record(TcpStateChange, pid=None, comm=None)
    with Writer(out, parse_libxo("text,flush-line")) as w:
        w.open_container("nettrail")
        w.record(rec)
        first = out.getvalue()
        w.record(msgspec.structs.replace(rec, seq=2))
        second = out.getvalue()
    assert first.splitlines() == [
        "TIME                         PROBE         SRC             DST                PREV-STATE  STATE",
        "2025-11-29T08:00:00.123456Z  state-change  10.0.0.5:44312  93.184.216.34:443  SYN_SENT    ESTABLISHED",
    ]
    assert second == first + first.splitlines()[1] + "\n"  # no second header: the widths did not change


def test_no_humanize_shows_raw_numbers_with_their_units() -> None:
    conn = full_record(Connection)
    row = render([conn], "text,no-humanize").splitlines()[1]
    assert row.split()[4:10] == ["120", "1024", "bytes", "118", "1048576", "bytes"]
    assert "9.623456 s" in row


def test_json_xml_and_html_do_not_change_with_the_text_tables() -> None:
    """The other styles never see the text-only options (--relative)."""
    rec = full_record(Connection)
    for spec in ("json", "xml", "html"):
        plain = render([rec], spec)
        out = io.StringIO()
        render_records([rec], with_relative(spec), out)
        assert out.getvalue() == plain


def with_relative(spec: str) -> XoOptions:
    return dataclasses.replace(parse_libxo(spec), relative=True)


def test_a_live_connection_shows_the_kernel_counters_and_state() -> None:
    live = Connection(
        host_id="h", boot_id="b", seq=1, ts_ns=1, ts_wall=1764403201.0, provider="tcp", probe="destroy", proto="tcp",
        source="kernel", src="127.0.0.1", sport=8080, dst="127.0.0.1", dport=51000, start=1764403200.25,
        end=1764403201.0, duration=0.75, state="CLOSED", bytes_acked=1200, bytes_received=3000, segs_in=5, segs_out=4,
        total_retrans=2, pid=7, comm="nginx",
    )  # fmt: skip
    assert render([live]).splitlines() == [
        "PROTO  LOCAL/ORIG      REMOTE/RESP      STATE   PKTS>   BYTES>  PKTS<   BYTES<  DURATION  RETX  FINDINGS",
        "tcp    127.0.0.1:8080  127.0.0.1:51000  CLOSED      4  1.2 KiB      5  2.9 KiB    750 ms     2  -",
        "    start 2025-11-29T08:00:00.250000Z  process nginx[7]",
    ]

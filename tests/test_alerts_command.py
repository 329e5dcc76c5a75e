"""`nettrail alerts FILE`: replays a record file through the rules and prints the alerts with xo."""

from __future__ import annotations

import json

from nettrail.cli import main
from tests.alert_streams import Stream
from translators.records import to_json, to_msgpack


def write_stream(path, bad_line: bytes | None = None, msgpack: bool = False):
    s = Stream()
    recs = []
    for _ in range(3):
        s.advance(1)
        recs.append(s.drop("TCP_ZEROWINDOW", "10.0.0.9", 5001, "10.0.0.2", 7000))
    with open(path, "wb") as f:
        for i, r in enumerate(recs):
            f.write(to_msgpack(r) if msgpack else to_json(r) + b"\n")
            if i == 0 and bad_line is not None:
                f.write(bad_line)
    return recs


def test_it_prints_every_emitted_alert_as_json(tmp_path, capsys):
    p = tmp_path / "trace.jsonl"
    recs = write_stream(p)
    assert main(["alerts", str(p), "--libxo", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    alerts = doc["nettrail"]["alert"]
    assert [(a["rule_id"], a["condition"], a["status"], a["count"]) for a in alerts] == [
        ("K5", "tcp-zerowindow", "open", 1),
        ("K5", "tcp-zerowindow", "open", 3),  # final state at the end of the file
    ]
    assert alerts[1]["evidence"] == [r.seq for r in recs]
    assert alerts[0]["alert_id"] == alerts[1]["alert_id"]


def test_it_prints_only_the_last_version_with_final(tmp_path, capsys):
    p = tmp_path / "trace.jsonl"
    write_stream(p)
    assert main(["alerts", str(p), "--final", "--libxo", "json"]) == 0
    alerts = json.loads(capsys.readouterr().out)["nettrail"]["alert"]
    assert [(a["rule_id"], a["count"]) for a in alerts] == [("K5", 3)]


def test_it_reports_a_bad_line_by_number_and_still_analyses_the_rest(tmp_path, capsys):
    p = tmp_path / "trace.jsonl"
    write_stream(p, bad_line=b'{"kind": "skb_drop", "seq": "x"}\n')
    assert main(["alerts", str(p), "--final", "--libxo", "json"]) == 1
    out = capsys.readouterr()
    assert [a["count"] for a in json.loads(out.out)["nettrail"]["alert"]] == [3]
    assert out.err.startswith(f"nettrail alerts: {p}:2: ")


def test_it_reads_msgpack_record_streams(tmp_path, capsys):
    p = tmp_path / "trace.msgpack"
    write_stream(p, msgpack=True)
    assert main(["alerts", str(p), "--final", "--libxo", "json"]) == 0
    assert [a["count"] for a in json.loads(capsys.readouterr().out)["nettrail"]["alert"]] == [3]


def test_it_applies_a_rules_file_and_rejects_a_bad_one(tmp_path, capsys):
    p = tmp_path / "trace.jsonl"
    write_stream(p)
    rules = tmp_path / "rules.toml"
    rules.write_text("[K5]\nenabled = false\n")
    assert main(["alerts", str(p), "--rules", str(rules), "--libxo", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"nettrail": {}}
    rules.write_text("[K5]\nwindow = 3\n")
    assert main(["alerts", str(p), "--rules", str(rules)]) == 2
    assert (
        capsys.readouterr().err
        == f"nettrail alerts: {rules}: unknown key K5.window (known: enabled, window_s, zero_window_s)\n"
    )


def test_it_says_what_is_wrong_with_the_file_name(tmp_path, capsys):
    assert main(["alerts", str(tmp_path / "missing.jsonl")]) == 1
    assert "No such file or directory" in capsys.readouterr().err
    assert main(["alerts", str(tmp_path / "trace.pcap")]) == 2
    assert "must end in .jsonl or .msgpack" in capsys.readouterr().err


def test_it_reads_json_lines_from_stdin(tmp_path):
    import subprocess
    import sys

    from tests.collect_process import ROOT

    p = tmp_path / "trace.jsonl"
    write_stream(p)
    out = subprocess.run(
        [sys.executable, "-m", "nettrail.cli", "alerts", "-", "--final", "--libxo", "json"],
        input=p.read_bytes(), capture_output=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert [a["count"] for a in json.loads(out.stdout)["nettrail"]["alert"]] == [3]

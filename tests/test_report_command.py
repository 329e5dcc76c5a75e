"""`nettrail report`: JSON/XML reports that validate against docs/schema, exact contents,
filters, SIFTR export, exit statuses, and -o never leaving a partial file."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from report_cast import CONN_A, CONN_B, CONN_C, K1, store_cast
from report_schemas import validate_json, validate_xml

from nettrail.cli import main
from translators.siftr_log import read_log

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


@pytest.fixture
def stored(db: None) -> None:
    store_cast()


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["report", *args])
    out = capsys.readouterr()
    return status, out.out, out.err


def report_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    status, out, err = run(capsys, "--libxo", "json", *args)
    assert status == 0, err
    doc = json.loads(out)
    validate_json(doc)
    return doc["nettrail_report"]  # type: ignore[no-any-return]


def test_the_json_report_validates_and_holds_every_connection_lifecycle(
    stored: None, capsys: pytest.CaptureFixture[str]
) -> None:
    rep = report_json(capsys)
    conns = rep["connection"]
    assert [c["conn_uuid"] for c in conns] == [CONN_A, CONN_B, CONN_C]
    a = conns[0]
    assert (a["host_id"], a["state"], a["retransmits"], a["resets"], a["alerts"]) == ("alpha", "CLOSED", 1, 1, 1)
    assert [s["state"] for s in a["tcp_state"]] == ["SYN_SENT", "ESTABLISHED", "CLOSED"]
    assert [s["snd_cwnd"] for s in a["siftr_sample"]] == [14480, 28960, 43440]
    assert [x["seq"] for x in a["tcp_retransmit"]] == [6]
    assert [(x["rule_id"], x["thresholds"]) for x in a["alert"]] == [("K1", K1)]
    assert [x["sender"] for x in a["tcp_reset"]] == ["peer"]
    assert set(a) - {"conn_uuid"} >= {"tcp_state", "siftr_sample", "tcp_retransmit", "alert", "tcp_reset"}
    assert "skb_drop" not in a
    assert [x["drop_reason_str"] for x in conns[2]["skb_drop"]] == ["TCP_CSUM"]
    un = rep["unattributed"]
    assert [x["lost"] for x in un["loss_report"]] == [5, 2]
    assert [x["rule_id"] for x in un["alert"]] == ["H1"]
    assert [x["drop_reason_str"] for x in un["skb_drop"]] == ["NO_SOCKET"]
    assert [x["count"] for x in un["drop_count"]] == [9]


def test_the_header_sums_hosts_providers_loss_drops_and_thresholds(
    stored: None, capsys: pytest.CaptureFixture[str]
) -> None:
    head = report_json(capsys)["header"]
    assert [(h["name"], h["connections"]) for h in head["host"]] == [("alpha", 2), ("beta", 1)]
    kinds = {k["name"]: k["records"] for k in head["kind"]}
    assert kinds == {"tcp_state": 5, "siftr_sample": 5, "tcp_retransmit": 1, "tcp_reset": 1, "alert": 2,
                     "loss_report": 2, "drop_count": 1, "skb_drop": 2}  # fmt: skip
    providers = {p["name"]: p["records"] for p in head["provider"]}
    assert providers == {"tcp": 7, "siftr": 5, "nettrail": 2, "linux": 2, "skb": 3}
    assert head["loss"] == {"event": [{"host": "alpha", "event_type": "tcp_probe", "lost": 7}], "lost_total": 7}
    assert sorted((d["reason"], d["drops"]) for d in head["drop"]) == [("NO_SOCKET", 1), ("TCP_CSUM", 1)]
    rules = {r["rule_id"]: {t["name"]: t["value"] for t in r["threshold"]} for r in head["rule"]}
    assert rules == {"H1": {"min_count": 5}, "K1": K1}


def test_filters_narrow_the_report_by_host_connection_time_and_kind(
    stored: None, capsys: pytest.CaptureFixture[str]
) -> None:
    beta = report_json(capsys, "--host", "beta")
    assert [c["conn_uuid"] for c in beta["connection"]] == [CONN_C]
    assert beta["header"]["filter"]["host"] == ["beta"]
    one = report_json(capsys, "--connection", CONN_B)
    assert [c["conn_uuid"] for c in one["connection"]] == [CONN_B] and "unattributed" not in one
    timed = report_json(capsys, "--since", "1003", "--until", "1005", "--kind", "siftr_sample,tcp-state")
    assert [c["conn_uuid"] for c in timed["connection"]] == [CONN_A]
    assert [s["seq"] for s in timed["connection"][0]["siftr_sample"]] == [3, 4, 5]
    assert "tcp_state" not in timed["connection"][0]
    assert timed["header"]["filter"]["kinds"] == "siftr_sample,tcp_state"


def test_the_xml_report_validates_against_the_xsd(stored: None, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "--libxo", "xml,pretty")
    assert status == 0, err
    validate_xml(out)
    root = ET.fromstring(out)
    assert [c.findtext("conn-uuid") for c in root.findall("connection")] == [CONN_A, CONN_B, CONN_C]
    assert [s.findtext("snd-cwnd") for s in root.findall("connection")[0].findall("siftr-sample")] == [
        "14480",
        "28960",
        "43440",
    ]
    assert root.findtext("header/loss/lost-total") == "7"


def test_text_and_html_styles_show_one_line_per_connection_and_record(
    stored: None, capsys: pytest.CaptureFixture[str]
) -> None:
    status, text, _ = run(capsys, "--connection", CONN_B)
    assert status == 0
    lines = text.splitlines()
    assert any(line.startswith("connection " + CONN_B + "  host alpha") for line in lines)
    # one table row per record, each starting with its ISO 8601 time
    assert sum(line.startswith("1970-01-01T") and " siftr " in line for line in lines) == 2
    status, text, _ = run(capsys, "--connection", CONN_A)
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"connection {CONN_A}  host alpha"))
    probes = [line.split()[1] for line in lines[start + 1 :] if line.startswith("1970-01-01T")]
    # text shows the lifecycle in kernel-time order, whatever the kind (a table per run of a kind)
    assert probes == ["state-change", "state-change", "siftr", "siftr", "siftr", "retransmit",
                      "alert", "reset-received", "state-change"]  # fmt: skip
    assert (
        lines[start + 4] == "TIME                         PROBE         SRC             DST           PREV-STATE  STATE"
    )
    status, html, _ = run(capsys, "--libxo", "html", "--connection", CONN_B)
    assert (
        status == 0 and html.count('data-tag="conn-uuid"') == 1 and html.count('<div class="title">siftr_sample') == 2
    )


def test_each_connection_opens_with_a_line_for_people_not_key_value_pairs(
    stored: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """The text style's connection header (issue 17 item 2), against a golden file;
    NETTRAIL_REGEN_GOLDEN=1 rewrites it. JSON, XML and HTML keep the fields."""
    status, text, _ = run(capsys)
    assert status == 0
    lines = text.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("connection ")]
    got = "".join("\n".join(lines[i : i + 3]) + "\n" for i in heads)
    golden = Path(__file__).parent / "golden" / "text" / "report-connections.text.out"
    if os.environ.get("NETTRAIL_REGEN_GOLDEN") == "1":
        golden.write_text(got, encoding="utf-8")
    assert got == golden.read_text(encoding="utf-8")
    assert not any(" host-id " in line or " bytes-out " in line for line in lines)
    status, raw, _ = run(capsys, "--libxo", "text,no-humanize", "--connection", CONN_A)
    assert (
        f"connection {CONN_A}  host alpha  boot boot-1" in raw and "from 1001.000000 to 1009.000000 (8.000000 s)" in raw
    )


def test_the_siftr_export_writes_a_log_the_parser_reads_back(
    stored: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "alpha.siftr"
    status, _, err = run(capsys, "--host", "alpha", "--siftr", "1.2.3", "-o", str(out))
    assert status == 0, err
    log = read_log(out, host_id="x", boot_id="y")
    assert log.header.version == "1.2.3" and log.header.sysname == "Linux"
    assert [s.snd_cwnd for s in log.samples] == [14480, 28960, 43440, 14480, 14480]
    assert log.footer is not None and log.footer.counters["num_outbound_tcp_pkts"] == 5
    assert len(log.footer.flows) == 5  # the cast gives every record its own source port


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (
            ["--connection", "6f2d7a1e-0000-4c1e-9f51-000000000000"],
            1,
            "unknown connection 6f2d7a1e-0000-4c1e-9f51-000000000000",
        ),
        (["--host", "gamma"], 1, "unknown host gamma"),
        (["--since", "2000", "--until", "1000"], 2, "inverted time range"),
        (["--libxo", "yaml"], 2, "yaml"),
        (["--kind", "tcp_bogus"], 2, "unknown record kind tcp_bogus"),
        (["--connection", "not-a-uuid"], 2, "expected a UUID"),
        (["--pcap", "-o", "/dev/null"], 1, "no packet record with frame bytes"),
    ],
)
def test_bad_requests_exit_with_a_clear_error(
    stored: None, capsys: pytest.CaptureFixture[str], args: list[str], status: int, message: str
) -> None:
    try:
        code = main(["report", *args])
    except SystemExit as exc:  # libxo_from_args exits 2 itself, as libxo tools do
        code = exc.code
    err = capsys.readouterr().err
    assert code == status
    assert message in err and err.startswith("nettrail")


def test_a_failure_midway_leaves_no_partial_file(
    stored: None, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from webapp.reports import render

    real = render.as_records

    def failing(*args: Any, **kw: Any) -> Iterator[Any]:
        for i, rec in enumerate(real(*args, **kw)):
            if i == 2:
                raise OSError(28, "No space left on device")
            yield rec

    target = tmp_path / "report.json"
    target.write_text("previous report\n")
    monkeypatch.setattr(render, "as_records", failing)
    status, _, err = run(capsys, "--libxo", "json", "-o", str(target))
    assert status == 1 and "No space left on device" in err
    assert target.read_text() == "previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
    monkeypatch.setattr(render, "as_records", real)
    assert run(capsys, "--libxo", "json", "-o", str(target))[0] == 0
    assert json.loads(target.read_text())["nettrail_report"]["connection"][0]["conn_uuid"] == CONN_A
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_an_unset_database_is_an_error_before_any_output(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    env["NETTRAIL_DATA"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "nettrail.cli", "report"], capture_output=True, text=True, env=env,
                          cwd=Path(__file__).resolve().parents[1], timeout=120)  # fmt: skip
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr.startswith("nettrail report: cannot read the database: ")

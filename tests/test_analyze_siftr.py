"""`nettrail analyze FILE.siftr`: detection by header, flow summaries, --store, and a
byte-identical log after import -> database -> `nettrail report --siftr`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_siftr_log import many_samples, render

from nettrail.cli import main
from webapp.traces.models import LossReport, SiftrSample


def write_log(tmp_path: Path, version: str = "1.3.0") -> Path:
    samples = many_samples()[:10]
    path = tmp_path / f"box-{version}.siftr"
    path.write_text(render(samples, version, enable_time=samples[0].ts_wall, disable_time=samples[-1].ts_wall,
                           skipped={"num_outbound_skipped_pkts_inpcb": 2}))  # fmt: skip
    return path


def test_analyze_recognises_a_siftr_log_and_summarises_its_flows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_log(tmp_path)
    assert main(["analyze", str(path), "--libxo", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)["analyze"]
    assert (doc["format"], doc["host_id"]) == ("siftr", path.name)
    assert [(f["sport"], f["samples"], f["max_cwnd"]) for f in doc["flow"]] == [(44312, 5, 14488), (80, 5, 14489)]
    assert [(x["event_type"], x["lost"]) for x in doc["loss_report"]] == [("outbound_skipped_pkts_inpcb", 2)]
    assert "siftr_sample" not in doc
    assert main(["analyze", str(path), "--libxo", "json", "--packets"]) == 0
    assert len(json.loads(capsys.readouterr().out)["analyze"]["siftr_sample"]) == 10


def test_a_malformed_siftr_log_names_the_line_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_log(tmp_path)
    lines = path.read_text().splitlines()
    lines[4] = lines[4].replace(",", ";", 3)
    path.write_text("\n".join(lines) + "\n")
    assert main(["analyze", str(path)]) == 1
    assert f"{path}:5: expected 27 comma-separated fields" in capsys.readouterr().err


@pytest.mark.django_db
@pytest.mark.parametrize("version", ["1.2.3", "1.3.0", "2.2"])
def test_a_stored_log_exports_back_byte_for_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    path = write_log(tmp_path, version)
    assert main(["analyze", str(path), "--store"]) == 0
    assert SiftrSample.objects.filter(host_id=path.name).count() == 10
    losses = list(LossReport.objects.values_list("event_type", "lost"))
    assert losses == ([] if version == "2.2" else [("outbound_skipped_pkts_inpcb", 2)])  # 2.x has no skip counters
    out = tmp_path / "again.siftr"
    assert main(["report", "--host", path.name, "--siftr", version, "-o", str(out)]) == 0
    assert out.read_text() == path.read_text()

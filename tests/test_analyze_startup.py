"""Start-up of `nettrail analyze` (issue 17 item 7): which modules a small capture loads.

Time is measured in bench/bench_startup.py beside tshark, never here; this test pins
what makes start-up slow when it creeps back: the command imports only its own
subcommand, one xo style, no jinja2 (JSON and text records need no template), no Django,
no scapy, no collector BPF loader, no progress bar, no decoding worker process and no
numpy for a small file (it is decoded in plain Python, translators/packet_rows.py), and
no alert engine when every connection of the capture succeeded.
Keep in sync with: nettrail/cli.py, nettrail/commands/analyze.py, xo/styles/__init__.py,
analysis/alerts/capture_rules.py, analysis/capture/decoding.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tcpbuild import A, B, Conv

ROOT = Path(__file__).resolve().parent.parent
PROBE = """
import json, sys
from nettrail.cli import main
status = main(sys.argv[1:])
sys.stdout.flush()
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
sys.exit(status)
"""
# Never loaded by a plain `nettrail analyze small.pcap --libxo json` of a clean capture.
ABSENT = (
    "django", "webapp", "scapy", "rich", "collector.bpf", "multiprocessing", "analysis.capture.pcap_worker",
    "analysis.alerts.engine", "analysis.alerts.rules", "analysis.alerts.live", "analysis.alerts.notify",
    "analysis.capture.siftr", "analysis.export", "xo.zeek", "xo.styles.text", "xo.styles.xml", "xo.styles.html",
    "nettrail.commands.collect", "nettrail.commands.up", "nettrail.commands.serve", "nettrail.commands.report",
    "http.client", "ssl", "email", "jinja2", "numpy", "socket", "tomllib", "analysis.alerts.config",
)  # fmt: skip


def ten_packets(path: Path) -> Path:
    c = Conv()
    c.handshake()
    c.send(A, "PA", b"GET / HTTP/1.0\r\n\r\n")
    c.send(B, "A")
    c.send(B, "PA", b"HTTP/1.0 200 OK\r\n\r\n")
    c.send(A, "A")
    c.send(A, "FA")
    c.send(B, "FA")
    c.send(A, "A")
    return c.write(path)


def loaded(path: Path, *args: str) -> tuple[list[str], str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, "analyze", str(path), *args], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    modules: list[str] = json.loads(proc.stderr.splitlines()[-1])
    return modules, proc.stdout


@pytest.mark.parametrize("style", ["json", "text"])
def test_a_small_capture_loads_nothing_it_does_not_use(tmp_path: Path, style: str) -> None:
    modules, out = loaded(ten_packets(tmp_path / "small.pcap"), "--libxo", style)
    absent = [a for a in ABSENT if a != f"xo.styles.{style}"]
    assert [m for m in modules if any(m == a or m.startswith(a + ".") for a in absent)] == []
    assert f"xo.styles.{style}" in modules
    if style == "json":
        doc = json.loads(out)["analyze"]
        assert [(c["conn_state"], c["findings"]) for c in doc["connection"]] == [("SF", [])]


def test_a_failed_connect_still_runs_the_capture_rules(tmp_path: Path) -> None:
    c = Conv()
    c.send(A, "S")
    c.send(B, "RA", ack=c.seq[A])
    modules, _ = loaded(c.write(tmp_path / "rej.pcap"), "--libxo", "json")
    assert "analysis.alerts.engine" in modules and "django" not in modules

"""K9 SYN flood on a capture the test records: tcpdump on the loopback of a network
namespace while a raw socket sends 400 spoofed SYNs a second for 6.5 s; `nettrail
analyze --packets` turns the capture into records and the engine judges them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import msgspec
import pytest

from analysis.alerts.config import config_from_mapping
from analysis.alerts.engine import run
from tests.collect_process import ROOT
from tests.loopback_capture import wait_captured
from translators.records import Alert, AnyRecord

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespace, tcpdump and a raw socket"),
]


def capture_flood(tmp_path) -> tuple[int, str]:
    name = f"ntflood{os.getpid()}"
    pcap = tmp_path / "flood.pcap"
    subprocess.run(["ip", "netns", "add", name], check=True)
    dump = None
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        dump = subprocess.Popen(
            ["ip", "netns", "exec", name, "tcpdump", "-i", "lo", "-U", "-w", str(pcap), "tcp port 8088"],
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert dump.stderr is not None
        assert "listening on" in dump.stderr.readline()  # the packet socket is open
        sent = subprocess.run(
            ["ip", "netns", "exec", name, sys.executable, str(ROOT / "tests" / "alert_synflood.py"), "400", "6.5"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        wait_captured(pcap, int(sent.stdout))  # -U: written as read; a busy tcpdump catches up
    finally:
        if dump is not None:
            dump.send_signal(2)
            dump.wait(30)
        subprocess.run(["ip", "netns", "del", name], check=False)
    return int(sent.stdout), str(pcap)


def test_a_recorded_syn_flood_raises_one_critical_k9_alert(tmp_path):
    sent, pcap = capture_flood(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "nettrail.cli", "analyze", pcap, "--packets", "--libxo", "json"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)["analyze"]
    records = [msgspec.convert(p, AnyRecord) for p in doc["packet"] if p["kind"] == "tcp_segment"]
    assert sent >= 2500 and len(records) == sent  # tcpdump was stopped only once it had them all
    alerts = [r for r in run(iter(records), config_from_mapping({})) if isinstance(r, Alert)]
    last = {a.alert_id: a for a in alerts}
    flood = [a for a in last.values() if (a.rule_id, a.condition) == ("K9", "syn-flood")]
    assert len(flood) == 1
    a = flood[0]
    assert (a.severity, a.dst, a.dport, a.host_id) == ("critical", "127.0.0.1", 8088, "flood.pcap")
    assert a.metric is not None and 256 < a.metric <= 410
    assert "SYN flood" in a.message
    assert [x for x in last.values() if x.condition == "syn-scan"] == []  # every SYN had its own source

"""`nettrail analyze` runs the kernel-agnostic rules (K9 scans, K14 connect failures)
over a capture's connection summaries, after P1-P6: a capture the test records in its
own network namespace of connects to closed ports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.collect_process import ROOT
from tests.loopback_capture import wait_captured

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespace and tcpdump"),
]

REFUSED = 45  # connects to closed ports: 20 distinct, then one port 25 times
CONNECTS = """
import socket, time
for port in [*range(9001, 9021), *[9100] * 25]:
    s = socket.socket()
    assert s.connect_ex(("127.0.0.1", port)) != 0
    s.close()
    time.sleep(0.005)
"""


def capture_refusals(tmp_path) -> str:
    name = f"ntscan{os.getpid()}"
    pcap = tmp_path / "scan.pcap"
    subprocess.run(["ip", "netns", "add", name], check=True)
    dump = None
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        dump = subprocess.Popen(
            ["ip", "netns", "exec", name, "tcpdump", "-i", "lo", "--immediate-mode", "-U", "-w", str(pcap), "tcp"],
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert dump.stderr is not None
        assert "listening on" in dump.stderr.readline()
        time.sleep(0.5)  # "listening on" comes a moment before the first packet is caught
        subprocess.run(["ip", "netns", "exec", name, sys.executable, "-c", CONNECTS], check=True, timeout=30)
        assert wait_captured(pcap, 2 * REFUSED) == 2 * REFUSED  # a SYN and its RST each
    finally:
        if dump is not None:
            dump.send_signal(2)
            dump.wait(30)
        subprocess.run(["ip", "netns", "del", name], check=False)
    return str(pcap)


def analyze(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "nettrail.cli", "analyze", *args, "--libxo", "json"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["analyze"]


def test_a_capture_of_refused_connects_raises_a_port_scan_and_connect_failures(tmp_path):
    pcap = capture_refusals(tmp_path)
    doc = analyze(pcap)
    states = [c["conn_state"] for c in doc["connection"]]
    assert states.count("REJ") == REFUSED
    alerts = doc["alert"]
    assert sorted((a["rule_id"], a["condition"]) for a in alerts) == [
        ("K14", "connect-failures"), ("K9", "port-scan"), ("P7", None)]  # fmt: skip
    refused = next(a for a in alerts if a["rule_id"] == "P7")  # the findings: one alert for the server
    assert (refused["severity"], refused["count"], refused["dst"], refused["dport"]) == ("notice", 45, "127.0.0.1", 0)
    scan = next(a for a in alerts if a["rule_id"] == "K9")
    assert (scan["src"], scan["dst"], scan["metric"], scan["host_id"]) == ("127.0.0.1", "127.0.0.1", 21, "scan.pcap")
    assert "failed TCP connection attempts to 21 distinct ports of 127.0.0.1" in scan["message"]
    failures = next(a for a in alerts if a["rule_id"] == "K14")
    assert (failures["dst"], failures["dport"], failures["severity"], failures["metric"]) == (
        "127.0.0.1", 9100, "critical", 1.0)  # fmt: skip
    assert "25 of 25 connection attempts to 127.0.0.1:9100 failed" in failures["message"]
    # the same alerts with --packets (the records stream through the engine as well)
    with_packets = analyze(pcap, "--packets")
    assert sorted((a["rule_id"], a["condition"]) for a in with_packets["alert"]) == [
        ("K14", "connect-failures"), ("K9", "port-scan"), ("P7", None)]  # fmt: skip


def test_a_rules_file_can_switch_the_capture_rules_off(tmp_path):
    pcap = capture_refusals(tmp_path)
    rules = tmp_path / "rules.toml"
    rules.write_text("[K9]\nenabled = false\n[K14]\nenabled = false\n")
    assert [a["rule_id"] for a in analyze(pcap, "--rules", str(rules))["alert"]] == ["P7"]  # not a K rule
    rules.write_text("[K9]\nport_scan_ports = 'many'\n")
    out = subprocess.run(
        [sys.executable, "-m", "nettrail.cli", "analyze", pcap, "--rules", str(rules)],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip() == f"nettrail: analyze: {rules}: K9.port_scan_ports must be a number, got 'many'"

"""`nettrail collect --alerts`: the rule engine over the live stream, stack_counter
records for MIB counters (K4 listen overflow on kernels without TCP_LISTEN_OVERFLOW
drops), and spool loss turned into loss_report records."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from analysis.alerts.config import config_from_mapping
from analysis.alerts.live import Alerting, Extras
from collector.sinks.http import HttpSink
from collector.stack_counters import read_mib
from tests.collect_process import ROOT, Collector
from tests.kernel_support import bpf_skip_reason, free_port
from translators.kernel import KernelEnv
from translators.records import Alert, LossReport, TcpStateChange, from_json

pytestmark = pytest.mark.skipif(bpf_skip_reason() is not None, reason=bpf_skip_reason() or "")


def ns_counters(ns: str) -> dict[tuple[str, str], int]:
    out = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-c",
         "import json; from collector.stack_counters import read_mib; "
         "print(json.dumps([[g, n, v] for (g, n), v in read_mib().items()]))"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return {(g, n): v for g, n, v in json.loads(out.stdout)}


@pytest.fixture
def netns():
    name = f"ntk4{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def test_a_flooded_listener_raises_k4_from_the_listen_overflows_counter(netns, tmp_path):
    out = tmp_path / "records.jsonl"
    inode = os.stat(f"/run/netns/{netns}").st_ino
    collector = subprocess.Popen(
        ["ip", "netns", "exec", netns, sys.executable, "-m", "nettrail.cli", "collect", "--alerts",
         "--providers", "tcp", "--out", str(out), "--filter", f"netns={inode}"],
        cwd=ROOT, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert collector.stderr is not None
        assert "(programs " in collector.stderr.readline()
        time.sleep(0.5)  # the counters' baseline is read right after attaching
        before = ns_counters(netns)
        subprocess.run(
            ["ip", "netns", "exec", netns, sys.executable, str(ROOT / "tests" / "listen_flood.py"), "7400", "10", "1.5"],
            check=True, timeout=30,
        )  # fmt: skip
        after = ns_counters(netns)
        time.sleep(1.2)  # one more counter read
    finally:
        collector.send_signal(2)
        collector.wait(30)
    assert collector.returncode == 0
    records = [from_json(line) for line in out.read_bytes().splitlines()]
    overflows = [r for r in records if r.kind == "stack_counter" and r.counter == "ListenOverflows"]
    expected = after[("TcpExt", "ListenOverflows")] - before[("TcpExt", "ListenOverflows")]
    assert expected >= 8  # 10 connects, a queue of 2: every SYN beyond it overflows, and again at its retry
    assert sum(r.delta for r in overflows) == expected
    assert all((r.mib, r.netns, r.provider, r.probe) == ("TcpExt", inode, "linux", "stack-counter") for r in overflows)
    assert overflows[-1].value == after[("TcpExt", "ListenOverflows")]
    drops = [r for r in records if r.kind == "stack_counter" and r.counter == "ListenDrops"]
    assert sum(r.delta for r in drops) == after[("TcpExt", "ListenDrops")] - before[("TcpExt", "ListenDrops")]
    k4 = {a.alert_id: a for a in records if isinstance(a, Alert) and a.rule_id == "K4"}
    assert len(k4) == 1
    alert = next(iter(k4.values()))  # the last version of the one alert
    assert (alert.condition, alert.severity, alert.netns, alert.proto) == ("overflow", "warning", inode, "tcp")
    assert alert.metric == expected
    # the full listener (collector/listen_queues.py), read just before each overflow record, and that record
    full = [r for r in records if r.kind == "sock_event" and r.probe == "listen-overflow"]
    assert alert.evidence == sorted([r.seq for r in overflows] + [r.seq for r in full])
    assert (alert.src, alert.sport, full[-1].queue, full[-1].backlog) == ("127.0.0.1", 7400, 2, 1)
    assert alert.message.startswith("The listener 127.0.0.1:7400 of python")
    assert f"network namespace {inode} ({netns}) counted {expected} ListenOverflows" in alert.message
    # the records behind the alert are in the stream too: the states of the flood's handshakes
    assert any(isinstance(r, TcpStateChange) and r.dport == 7400 for r in records)


def test_spool_losses_become_loss_reports_that_raise_h1(tmp_path):
    env = KernelEnv(host_id="spooltest", boot_id="b" * 16, wall_offset=0.0)
    sink = HttpSink(f"http://127.0.0.1:{free_port()}", "t", tmp_path / "spool", max_spool_bytes=4096, batch_size=50)

    class Numbered:
        seq = 1

        def number(self, records):
            for r in records:
                r.seq, self.seq = self.seq, self.seq + 1
            return records

    extras = Extras(Numbered(), env, sink, None)
    now = time.time()
    try:
        batch = [
            LossReport(host_id="spooltest", boot_id="b" * 16, seq=1000 + i, ts_ns=i, ts_wall=now, provider="nettrail",
                       probe="loss", event_type="filler", lost=0, lost_total=0, per_cpu=list(range(40)))
            for i in range(600)
        ]  # fmt: skip
        sink.write(batch)
        assert sink.flush(timeout=20)
        lost = sink.lost_records
        assert lost > 0
        out = extras.add([])
        assert extras.add([]) == []  # reported once
    finally:
        sink.close(timeout=0.5)
    assert len(out) == 1
    report = out[0]
    assert (report.kind, report.event_type, report.lost, report.lost_total, report.hook) == (
        "loss_report", "spool", lost, lost, "sink/spool")  # fmt: skip
    alerting = Alerting(config_from_mapping({}))
    written: list = []

    class ListSink:
        def write(self, records):
            written.extend(records)

    alerting.stream(iter([out]), ListSink())
    assert written[0] is report  # the loss record itself is shipped too
    h1 = {a.alert_id: a for a in written if isinstance(a, Alert) and a.rule_id == "H1"}
    assert len(h1) == 1
    alert = next(iter(h1.values()))
    assert (alert.condition, alert.severity, alert.host_id, alert.evidence) == (
        "lost-events", "critical", "spooltest", [report.seq])  # fmt: skip
    assert f"The collector lost {lost} spool events" in alert.message


def test_read_mib_pairs_header_and_value_lines(tmp_path):
    f = tmp_path / "netstat"
    f.write_text("TcpExt: A ListenOverflows\nTcpExt: 1 42\nIpExt: X\nIpExt: 7\n")
    assert read_mib([str(f)]) == {("TcpExt", "A"): 1, ("TcpExt", "ListenOverflows"): 42, ("IpExt", "X"): 7}


class Webhook(http.server.BaseHTTPRequestHandler):
    bodies: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        Webhook.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_idle_polls_let_timeouts_fire_and_alerts_reach_the_xo_output_and_the_webhook(tmp_path):
    """--filter keeps every other record out: only the idle heartbeat can sweep K10."""
    port = free_port()
    hook = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Webhook)
    threading.Thread(target=hook.serve_forever, args=(0.05,), daemon=True).start()
    rules = tmp_path / "rules.toml"
    rules.write_text(
        f"[K10]\nsweep_s = 1\nclose_wait_s = 1\n[notify]\nmin_severity = 'notice'\nwebhook_url = 'http://127.0.0.1:{hook.server_address[1]}/'\n"
    )
    Webhook.bodies = []
    args = ("--alerts", "--rules", str(rules), "--providers", "tcp", "--filter", f"port={port}", "--no-stack-counters")
    with Collector(*args, "--libxo", "json") as c:
        c.wait_attached()
        srv = socket.socket()
        srv.bind(("127.0.0.1", port))
        srv.listen(1)
        cli = socket.create_connection(("127.0.0.1", port))
        conn, _ = srv.accept()
        cli.close()  # the server side now sits in CLOSE_WAIT
        srv.close()
        time.sleep(6.0)  # well past close_wait_s (1 s) and the next sweep (1 s), with no record arriving
        status, out, err = c.stop()
        conn.close()
    hook.shutdown()
    hook.server_close()
    assert status == 0, err
    doc = json.loads(out)["nettrail"]
    alerts = [a for a in doc["alert"] if a["rule_id"] == "K10"]
    assert {(a["condition"], a["src"], a["sport"]) for a in alerts} == {("close-wait", "127.0.0.1", port)}
    assert any(s["state"] == "CLOSE_WAIT" and s["sport"] == port for s in doc["tcp_state"])
    posted = [b for b in Webhook.bodies if b["rule_id"] == "K10"]  # every emitted version, in order
    assert posted and {b["alert_id"] for b in posted} == {a["alert_id"] for a in alerts}
    assert (posted[0]["kind"], posted[0]["condition"], posted[0]["sport"]) == ("alert", "close-wait", port)


def test_a_broken_rules_file_is_refused_before_tracing(tmp_path):
    rules = tmp_path / "rules.toml"
    rules.write_text("[K4]\nwindow = 3\n")
    proc = subprocess.run(
        [sys.executable, "-m", "nettrail.cli", "collect", "--alerts", "--rules", str(rules), "--duration", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"nettrail collect: {rules}: unknown key K4.window (known: enabled, window_s, critical_seconds)"
    )

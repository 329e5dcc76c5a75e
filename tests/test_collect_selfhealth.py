"""Tracer self-health from a real `nettrail collect` (root): the collector_status it sends
first (H3: exactly the programs attached, checked against the kernel's BPF links; a
tracepoint missing from tracefs is left out and its rules reported unavailable), the
sampling reports of a ppl 4 run against the kernel's exact counts (H2), and its CPU
measurements against /proc/PID/stat, with the H4 alert under a low threshold."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from collector.bpf import loader
from tests.collect_process import Collector
from tests.kernel_support import bpf_skip_reason
from translators.records import Record, from_json

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(bpf_skip_reason() is not None, reason=bpf_skip_reason() or "")]

TICK = os.sysconf("SC_CLK_TCK")


def read_records(path: Path) -> list[Record]:
    return [from_json(line) for line in path.read_text().splitlines() if line.strip()]


def links() -> dict[int, str]:
    """prog id -> tracepoint of every BPF link in the kernel (bpftool link list)."""
    out = subprocess.run(["bpftool", "-j", "link", "list"], capture_output=True, text=True, check=True).stdout
    return {int(link["prog_id"]): str(link.get("tp_name")) for link in json.loads(out or "[]")}


def proc_cpu_s(pid: int) -> float:
    """utime + stime of /proc/PID/stat, seconds (fields 14 and 15, after the parenthesised comm)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def bulk_transfer(seconds: float) -> tuple[int, threading.Thread]:
    """A loopback TCP transfer of `seconds` on a fresh port; returns the port and the sender thread."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    port = lst.getsockname()[1]

    def run() -> None:
        with lst, socket.create_connection(("127.0.0.1", port)) as c:
            peer, _ = lst.accept()
            sink = threading.Thread(target=lambda: [None for _ in iter(lambda: peer.recv(1 << 16), b"")])
            sink.start()
            end = time.monotonic() + seconds
            chunk = b"x" * 32768
            while time.monotonic() < end:
                c.sendall(chunk)
            c.shutdown(socket.SHUT_WR)
            sink.join(10)
            peer.close()

    return port, threading.Thread(target=run)


def test_a_sampled_run_reports_its_attach_coverage_sampling_ratio_and_cpu(tmp_path: Path) -> None:
    out, rules = tmp_path / "records.jsonl", tmp_path / "rules.toml"
    rules.write_text("[H4]\nmax_cpu_percent = 0.5\n")  # low: a collector under load is above it
    port, sender = bulk_transfer(2.5)
    args = ["--providers", "tcp,siftr", "--ppl", "4", "--filter", f"port={port}", "--flow-interval", "0.5",
            "--stats-interval", "0.5", "--alerts", "--rules", str(rules), "--out", str(out)]  # fmt: skip
    with Collector(*args) as collector:
        ids = collector.wait_attached()
        pid = collector.proc.pid
        kernel_links = links()
        sender.start()
        samples: list[tuple[int, float]] = []  # (CLOCK_MONOTONIC ns, /proc CPU seconds)
        for _ in range(45):  # 4.5 s: the transfer and a quiet stretch
            samples.append((time.monotonic_ns(), proc_cpu_s(pid)))
            time.sleep(0.1)
        sender.join(15)
        status, _, err = collector.stop()
    assert status == 0, err
    records = read_records(out)

    # H3: the first record says exactly what is attached, as the kernel's links show it
    first = records[0]
    wanted = loader.program_names(loader.Options(providers=("tcp", "siftr")))
    assert first.kind == "collector_status"
    assert (first.pid, first.providers, first.ppl, first.absent, first.failed) == (pid, ["tcp", "siftr"], 4, [], {})
    assert first.attached == ids and sorted(first.attached) == sorted(wanted)
    assert {kernel_links.get(prog_id) for prog_id in first.attached.values()} == set(wanted)
    assert {name: kernel_links[prog_id] for name, prog_id in first.attached.items()} == {n: n for n in wanted}
    assert sorted(first.rules_unavailable) == ["K11", "K12"]  # no skb provider: no drops
    assert first.kernel_release == os.uname().release

    # H2: the windows add up to the kernel's exact per-flow counts, at one sample per ~4 buffers
    reports = [r for r in records if r.kind == "sampling_report"]
    finals: dict[str, Any] = {}
    for r in records:
        if r.kind == "flow_counters":
            finals[r.conn_uuid] = r  # the last report of each flow is its tcp_destroy_sock total
    assert len(finals) == 2 and all(r.setting == "ppl 4" and r.event_type == "siftr_sample" for r in reports)
    assert sum(r.observed for r in reports) == sum(f.skbs for f in finals.values())
    assert sum(r.emitted for r in reports) == sum(f.samples for f in finals.values())
    # the kernel counts a sample when it decides to take it: one whose ring reservation then
    # failed is a loss_report (H1), not a record
    lost = max((r.lost_total for r in records if r.kind == "loss_report" and r.event_type == "siftr_sample"), default=0)
    written = sum(1 for r in records if r.kind == "siftr_sample")
    assert written <= sum(r.emitted for r in reports) <= written + lost
    busy = [r for r in reports if r.emitted >= 100]
    assert busy and all(3.5 <= r.ratio <= 4.5 for r in busy), [(r.observed, r.emitted) for r in reports]

    # H4: the CPU the collector reports is what /proc/PID/stat says, and the intervals chain up
    stats = [r for r in records if r.kind == "collector_stats"]
    assert len(stats) >= 3 and all(r.pid == pid for r in stats)  # a busy loop checks the clock less often
    # the last says the collector stopped (--duration): nothing follows its alerts after it
    assert [r.stopped for r in stats] == [None] * (len(stats) - 1) + [True]
    for a, b in zip(stats, stats[1:], strict=False):
        assert b.cpu_total_s - a.cpu_total_s == pytest.approx(b.cpu_time_s, abs=2e-6)
    for r in stats:
        assert r.cpu_percent == pytest.approx(100 * r.cpu_time_s / r.interval_s, rel=1e-3, abs=0.01)
        assert r.events == sum(r.events_by_type.values())
    checked = 0
    for t_ns, cpu in samples:
        before = [r for r in stats if r.ts_ns < t_ns]
        after = [r for r in stats if r.ts_ns > t_ns]
        if before and after:
            # /proc/PID/stat truncates to clock ticks and, read from another process, leaves out
            # the runtime a running thread has not yet been charged (up to a scheduler tick)
            assert before[-1].cpu_total_s <= cpu + 2.0 / TICK + 0.01
            assert after[0].cpu_total_s >= cpu - 0.005
            checked += 1
    assert checked >= 5
    assert stats[-1].cpu_total_s - stats[0].cpu_total_s > 0.05  # real load, not an idle loop
    received = int(err.split("events received ")[1].split(",")[0])
    assert sum(r.events for r in stats) == received
    # ... and above the configured 0.5 % the H4 alert fires with that measurement as evidence
    h4 = [r for r in records if r.kind == "alert" and r.rule_id == "H4"]
    assert h4 and h4[0].thresholds["max_cpu_percent"] == 0.5
    by_seq = {r.seq: r for r in stats}
    evidence = by_seq[h4[0].evidence[0]]
    # H4 checks the agent's whole cost: its process, its children and its programs' kernel time
    assert evidence.agent_cpu_percent is not None and evidence.agent_cpu_percent >= evidence.cpu_percent
    assert evidence.agent_cpu_percent > 0.5 and h4[0].metric == evidence.agent_cpu_percent
    # each emitted version speaks of the interval that last fired it, and advises on its busiest type
    for a in h4:
        [r] = [r for r in stats if r.agent_cpu_percent == a.metric and r.seq in a.evidence]
        assert f"The collector (pid {pid}) used {r.agent_cpu_percent:.1f}% of one CPU" in a.message
        assert f"(its process {r.cpu_percent:.1f}%" in a.message
        busiest = max(r.events_by_type.items(), key=lambda kv: kv[1], default=("", 0))[0]
        assert ("raise --ppl" in a.message) == (busiest == "siftr_sample"), (r.events_by_type, a.message)
    assert any(max(r.events_by_type, key=r.events_by_type.__getitem__, default="") == "siftr_sample" for r in stats)


def test_tracepoints_missing_from_tracefs_are_not_attached_and_their_rules_are_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = Path("/sys/kernel/tracing/events")
    if not real.is_dir():
        pytest.skip("tracefs is not mounted at /sys/kernel/tracing")
    gone = {"tcp_probe", "tcp_cong_state_set"}
    for system in real.iterdir():  # this kernel's tracefs tree, without two tracepoints
        if system.is_dir():
            for event in system.iterdir():
                if event.is_dir() and event.name not in gone:
                    (tmp_path / "tracefs/events" / system.name / event.name).mkdir(parents=True)
    monkeypatch.setenv("NETTRAIL_TRACEFS", str(tmp_path / "tracefs"))
    out = tmp_path / "records.jsonl"
    with Collector("--providers", "tcp,siftr", "--out", str(out)) as collector:
        ids = collector.wait_attached()
        kernel_links = links()
        status, _, err = collector.stop()
    assert status == 0, err
    assert "; not attached: tcp_cong_state_set (absent on this kernel), tcp_probe (absent on this kernel)" in err
    first = read_records(out)[0]
    wanted = [n for n in loader.program_names(loader.Options(providers=("tcp", "siftr"))) if n not in gone]
    assert first.kind == "collector_status"
    assert first.absent == ["tcp_cong_state_set", "tcp_probe"]
    assert sorted(first.attached) == sorted(wanted) and first.attached == ids
    assert {kernel_links[prog_id] for prog_id in first.attached.values()} == set(wanted)
    assert sorted(first.rules_unavailable) == ["K1", "K11", "K12", "K13", "K5", "K6", "K7"]
    assert first.rules_unavailable["K7"] == (
        "no SIFTR or tcpdebug samples (cwnd, srtt, windows): tracepoint tcp_probe absent on this kernel; "
        "provider siftr-poll not chosen (--providers)"  # the way out on such a kernel
    )
    assert "tracepoint tcp_cong_state_set absent on this kernel" in first.rules_degraded["K2"]


def test_a_drop_event_budget_is_reported_against_the_exact_drop_counts(tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens on it once closed
    args = [
        "--providers",
        "skb",
        "--drop-rate",
        "1",
        "--filter",
        f"port={port}",
        "--flow-interval",
        "0.5",
        "--out",
        str(out),
    ]
    with Collector(*args) as collector:
        collector.wait_attached()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            for _ in range(60):  # datagrams to a closed port: NO_SOCKET drops, one event a second gets through
                udp.sendto(b"x", ("127.0.0.1", port))
        time.sleep(1.2)  # one more counter read
        status, _, err = collector.stop()
    assert status == 0, err
    records = read_records(out)
    reports = [r for r in records if r.kind == "sampling_report"]
    assert reports and {(r.event_type, r.setting) for r in reports} == {("skb_drop", "drop-rate 1/s per CPU")}
    counted = sum(r.delta for r in records if r.kind == "drop_count")
    events = sum(1 for r in records if r.kind == "skb_drop")
    assert counted >= 60 and 1 <= events <= 2 * os.cpu_count()  # at most one per CPU in the second
    assert (sum(r.observed for r in reports), sum(r.emitted for r in reports)) == (counted, events)
    assert all(r.ratio == round(r.observed / r.emitted, 4) for r in reports if r.emitted)

"""Every network namespace's stack counters on real namespaces (needs root and BPF): a real
`nettrail collect --alerts` runs in the test's own namespace while listeners with a
backlog of 1 that never accept are flooded in two namespaces it is not in: one named
(`ip netns add`) before the collector started, one made by `unshare -n` after it (no name,
overflowing before the collector's first read of it). The stack_counter records of each
namespace must add up to exactly that namespace's own counter moves (read from
/proc/PID/net/netstat of a process in it), and K4 must fire once per namespace, naming it
with those numbers and its listener. The reader's logic alone: tests/test_stack_counters.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from collector.stack_counters import StackCounters, read_mib
from tests.alert_kernel_support import KERNEL_ALERTS, namespace, split_alerts, stop
from tests.collect_process import ROOT, Collector
from translators.kernel import KernelEnv
from translators.records import Alert, CollectorStats, StackCounter, from_json

pytestmark = KERNEL_ALERTS
PORT = 7411
FLOOD = [sys.executable, str(ROOT / "tests" / "listen_flood.py"), str(PORT), "10", "1.5"]
COUNTERS = ("ListenOverflows", "ListenDrops")


def tcpext(pid: int) -> dict[str, int]:
    """The namespace's own ListenOverflows and ListenDrops, through a process in it."""
    mib = read_mib([f"/proc/{pid}/net/netstat"])
    return {name: mib[("TcpExt", name)] for name in COUNTERS}


def in_netns(pid: int, inode: int, timeout: float = 30) -> None:
    """Wait until `pid` is in namespace `inode` (ip netns exec and unshare enter it first)."""
    deadline = time.monotonic() + timeout
    while os.stat(f"/proc/{pid}/ns/net").st_ino != inode:
        assert time.monotonic() < deadline, f"pid {pid} never entered network namespace {inode}"
        time.sleep(0.05)


def sums(records: list[StackCounter], inode: int) -> dict[str, int]:
    return {name: sum(r.delta for r in records if r.netns == inode and r.counter == name) for name in COUNTERS}


def test_listen_overflows_in_two_other_namespaces_are_counted_exactly_and_k4_names_each(tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    name = f"ntsc{os.getpid() % 100000}"
    with namespace(name) as (_, named):
        holder = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "300"])  # the process read through
        late: subprocess.Popen[str] | None = None
        try:
            in_netns(holder.pid, named)
            with Collector("--alerts", "--providers", "tcp", "--filter", f"port={PORT}", "--out", str(out)) as col:
                col.wait_attached()  # the named namespace's baseline was read before attaching
                before = tcpext(holder.pid)
                subprocess.run(["ip", "netns", "exec", name, *FLOOD], check=True, timeout=60)
                after = tcpext(holder.pid)
                # a namespace made now, flooded at once: no baseline may swallow its first second
                script = f"ip link set lo up && {' '.join(FLOOD)} && echo flooded && read _"  # sh stays, alone
                late = subprocess.Popen(
                    ["unshare", "-n", "sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
                )
                assert late.stdout is not None and late.stdout.readline() == "flooded\n"
                unnamed = os.stat(f"/proc/{late.pid}/ns/net").st_ino
                late_counts = tcpext(late.pid)  # from zero: the namespace is new
                status, _, err = stop(col)  # its final read comes after both floods ended
        finally:
            for proc in (holder, late):
                if proc is not None:
                    proc.kill()
                    proc.wait()
    assert status == 0, err
    records = [from_json(line) for line in out.read_bytes().splitlines()]
    others, alerts = split_alerts(records)
    counters = [r for r in others if isinstance(r, StackCounter)]
    moved = {k: after[k] - before[k] for k in COUNTERS}
    assert moved["ListenOverflows"] >= 8  # 10 connects, a queue of 2: each SYN beyond it overflows
    assert late_counts["ListenOverflows"] >= 8
    assert sums(counters, named) == moved
    assert sums(counters, unnamed) == late_counts
    assert named != unnamed != os.stat("/proc/self/ns/net").st_ino
    assert {(r.netns_name, r.pid) for r in counters if r.netns == named} == {(name, holder.pid)}
    assert {(r.netns_name, r.pid, r.comm) for r in counters if r.netns == unnamed} == {(None, late.pid, "sh")}
    stats = [r for r in others if isinstance(r, CollectorStats)]
    assert stats and stats[-1].stopped  # the last one, at the stop: neither namespace was missed
    missed = {k: why for s in stats for k, why in s.counters_missed.items()}
    assert not {str(named), str(unnamed)} & set(missed), f"{missed}\n{err}"
    k4 = {a.netns: a for a in alerts if isinstance(a, Alert) and a.rule_id == "K4"}
    assert set(k4) >= {named, unnamed}
    for inode, counts, label in (
        (named, moved, f"({name})"),
        (unnamed, late_counts, f"(where sh, pid {late.pid}, runs)"),
    ):
        alert = k4[inode]
        overflows = [r for r in counters if r.netns == inode and r.counter == "ListenOverflows"]
        assert (alert.condition, alert.severity, alert.proto) == ("overflow", "warning", "tcp")
        assert alert.metric == counts["ListenOverflows"]
        # the flood's listener, full at each read where the counters moved (collector/listen_queues.py)
        full = [r for r in others if r.kind == "sock_event" and r.netns == inode and r.probe == "listen-overflow"]
        assert {(r.src, r.sport, r.queue, r.backlog) for r in full} == {("127.0.0.1", PORT, 2, 1)}
        assert alert.evidence == sorted([r.seq for r in overflows] + [r.seq for r in full])
        assert alert.message.startswith(f"The listener 127.0.0.1:{PORT} of {alert.comm} (pid {alert.tgid}) ")
        assert (
            f"network namespace {inode} {label} counted {counts['ListenOverflows']} ListenOverflows and "
            f"{counts['ListenDrops']} ListenDrops in the last 10 s"
        ) in alert.message, alert.message


def test_a_named_namespace_no_process_is_in_is_read_by_entering_it_and_said_when_deleted(capsys) -> None:
    """No /proc/PID/net to read through: the reader enters it by name (setns) and comes home."""
    name = f"ntsd{os.getpid() % 100000}"
    home = os.stat("/proc/thread-self/ns/net").st_ino
    env = KernelEnv(host_id="h", boot_id="b" * 16, wall_offset=0.0)
    with namespace(name) as (_, inode):
        reader = StackCounters(3600.0, only_netns=inode)  # called by hand: never a pacing line on stderr
        assert reader.found[inode].pids == ()  # nothing runs in it
        before = netstat_in(name)
        subprocess.run(["ip", "netns", "exec", name, *FLOOD], check=True, timeout=60)
        after = netstat_in(name)
        records = reader.records(env)
        assert os.stat("/proc/thread-self/ns/net").st_ino == home
        assert {r.counter: r.delta for r in records if r.counter in COUNTERS} == {
            k: after[k] - before[k] for k in COUNTERS
        }
        assert {(r.netns, r.netns_name, r.pid, r.comm) for r in records} == {(inode, name, None, None)}
        assert reader.missed == {}
    assert reader.records(env) == []
    why = f"network namespace {inode} ({name}) is gone: its stack counters' moves since their last read are unread"
    assert capsys.readouterr().err == f"nettrail collect: {why}\n"
    assert reader.take_missed() == {str(inode): why}  # collector_stats.counters_missed


def netstat_in(ns: str) -> dict[str, int]:
    text = subprocess.run(
        ["ip", "netns", "exec", ns, "cat", "/proc/net/netstat"], capture_output=True, text=True, check=True
    ).stdout
    names, values = text.splitlines()[:2]
    return {k: int(v) for k, v in zip(names.split()[1:], values.split()[1:], strict=True) if k in COUNTERS}

"""The stack counters of every network namespace (collector/stack_counters.py) over a
made-up /proc: baselines at the start, a record per counter that moved per namespace, a
namespace first seen later counted from zero, a gone or unreadable one said on stderr and
in collector_stats.counters_missed.
The kernel side (real namespaces, a real overflow, K4): tests/test_stack_counters_kernel.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from collector import netns
from collector.stack_counters import SELECTED, SelectedParser, StackCounters, read_mib
from translators.kernel import KernelEnv
from translators.records import StackCounter

ENV = KernelEnv(host_id="h", boot_id="b" * 16, wall_offset=0.0)
SLOW = 3600.0


class FakeProc:
    """/proc/PID/{ns/net,net/netstat,net/snmp,comm}; processes in one namespace share the
    inode of their ns/net file (hard links), as they share the kernel's nsfs inode."""

    def __init__(self, root: Path) -> None:
        self.proc = root / "proc"
        self.named = root / "netns"
        self.proc.mkdir()
        self.named.mkdir()
        self.first: dict[str, Path] = {}  # namespace label -> the ns/net file of its first process

    def process(self, pid: int, ns: str, comm: str = "srv") -> None:
        d = self.proc / str(pid)
        (d / "ns").mkdir(parents=True)
        (d / "net").mkdir()
        (d / "comm").write_text(comm + "\n")
        if ns in self.first:
            os.link(self.first[ns], d / "ns" / "net")
        else:
            (d / "ns" / "net").write_text("")
            self.first[ns] = d / "ns" / "net"

    def counters(self, pid: int, **values: int) -> None:
        """netstat and snmp as the kernel lays them out (extra counters around the selected)."""
        ext = {"SyncookiesSent": 0, "EmbryonicRsts": 9, "ListenOverflows": 0, "ListenDrops": 0, "TCPTimeouts": 0}
        tcp = {"RtoAlgorithm": 1, "AttemptFails": 0, "EstabResets": 0, "InErrs": 0, "OutRsts": 0}
        for k, v in values.items():
            (ext if k in ext else tcp)[k] = v
        d = self.proc / str(pid) / "net"
        (d / "netstat").write_text(
            f"TcpExt: {' '.join(ext)}\nTcpExt: {' '.join(map(str, ext.values()))}\nIpExt: InOctets\nIpExt: 5\n"
        )
        (d / "snmp").write_text(f"Tcp: {' '.join(tcp)}\nTcp: {' '.join(map(str, tcp.values()))}\n")

    def inode(self, ns: str) -> int:
        return os.stat(self.first[ns]).st_ino

    def reader(self) -> StackCounters:
        # an hour's interval: records() is called by hand, and a slow round on a busy machine
        # must not add a pacing line to the stderr the tests compare
        scan = lambda: netns.scan(str(self.proc), str(self.named))  # noqa: E731
        return StackCounters(SLOW, scan=scan, proc=str(self.proc))


def moved(records: list[object]) -> list[tuple[int | None, str, int, int, int | None, str | None]]:
    out = []
    for r in records:
        assert isinstance(r, StackCounter)
        out.append((r.netns, r.counter, r.value, r.delta, r.pid, r.comm))
    return out


@pytest.fixture
def fake(tmp_path: Path) -> FakeProc:
    return FakeProc(tmp_path)


def test_the_first_read_of_each_namespace_is_a_baseline_and_then_each_namespaces_moves_are_records(fake):
    fake.process(10, "a", "nginx")
    fake.process(11, "a")
    fake.process(20, "b", "redis")
    fake.counters(10, ListenOverflows=5, ListenDrops=5)
    fake.counters(20, OutRsts=100)
    sc = fake.reader()
    assert sc.records(ENV) == []  # nothing moved since the baselines
    fake.counters(10, ListenOverflows=12, ListenDrops=13, EmbryonicRsts=50)  # EmbryonicRsts is not selected
    fake.counters(20, OutRsts=103)
    recs = sc.records(ENV)
    a, b = fake.inode("a"), fake.inode("b")
    # in each namespace ListenDrops comes before ListenOverflows (K4 names both)
    assert moved(recs) == [
        (a, "ListenDrops", 13, 8, 10, "nginx"),
        (a, "ListenOverflows", 12, 7, 10, "nginx"),
        (b, "OutRsts", 103, 3, 20, "redis"),
    ]
    assert [(r.mib, r.hook, r.provider, r.probe, r.netns_name) for r in recs] == [
        ("TcpExt", "/proc/net/netstat", "linux", "stack-counter", None),
        ("TcpExt", "/proc/net/netstat", "linux", "stack-counter", None),
        ("Tcp", "/proc/net/snmp", "linux", "stack-counter", None),
    ]
    assert len({r.ts_ns for r in recs}) == 1  # one read stamps the batch
    assert sc.records(ENV) == []


def test_a_namespace_first_seen_after_the_start_counts_from_zero(fake):
    """Created (and overflowing) between two reads: its first second is reported, not a baseline."""
    fake.process(10, "a")
    fake.counters(10)
    sc = fake.reader()
    fake.process(30, "new", "flood")
    fake.counters(30, ListenOverflows=9, ListenDrops=9)
    assert moved(sc.records(ENV)) == [
        (fake.inode("new"), "ListenDrops", 9, 9, 30, "flood"),
        (fake.inode("new"), "ListenOverflows", 9, 9, 30, "flood"),
    ]


def test_the_next_process_of_a_namespace_is_read_when_the_first_exits(fake):
    fake.process(10, "a", "first")
    fake.process(11, "a", "second")
    fake.counters(10, InErrs=1)
    fake.counters(11, InErrs=1)
    sc = fake.reader()
    fake.counters(11, InErrs=4)
    for f in (fake.proc / "10" / "net").iterdir():
        f.unlink()  # exited after the scan: its files are gone
    assert moved(sc.records(ENV)) == [(fake.inode("a"), "InErrs", 4, 3, 11, "second")]


def test_a_namespace_that_is_gone_is_said_and_forgotten(fake, capsys):
    fake.process(10, "a")
    fake.process(20, "b")
    fake.counters(10)
    fake.counters(20)
    sc = fake.reader()
    b = fake.inode("b")
    for p in sorted((fake.proc / "20").rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    (fake.proc / "20").rmdir()
    assert sc.records(ENV) == []
    assert b not in sc.seen
    why = f"network namespace {b} is gone: its stack counters' moves since their last read are unread"
    assert capsys.readouterr().err == f"nettrail collect: {why}\n"
    assert sc.take_missed() == {str(b): why}  # in the next collector_stats, once
    assert sc.records(ENV) == [] and sc.take_missed() == {}


def test_a_namespace_that_loses_its_last_process_and_gains_one_again_goes_on_from_its_last_read(fake):
    """Kept alive unseen meanwhile (a bind mount elsewhere): its history is not reported twice."""
    fake.process(10, "a")
    fake.counters(10, OutRsts=50)
    sc = fake.reader()
    hidden = fake.proc / "hidden"
    (fake.proc / "10").rename(hidden)  # no process in it for a while
    assert sc.records(ENV) == []
    hidden.rename(fake.proc / "10")
    fake.counters(10, OutRsts=53)
    assert moved(sc.records(ENV)) == [(fake.inode("a"), "OutRsts", 53, 3, 10, "srv")]


def test_a_new_namespace_with_a_freed_inode_number_counts_from_zero(fake):
    """Its counters fell below what the inode's last namespace had: not the same namespace."""
    fake.process(10, "a")
    fake.counters(10, OutRsts=50)
    sc = fake.reader()
    fake.counters(10, OutRsts=2)
    assert moved(sc.records(ENV)) == [(fake.inode("a"), "OutRsts", 2, 2, 10, "srv")]


def test_an_unreadable_namespace_is_said_once_kept_in_missed_and_caught_up_later(fake, capsys):
    fake.process(10, "a")
    fake.counters(10, OutRsts=1)
    sc = fake.reader()
    netstat = fake.proc / "10" / "net" / "netstat"
    saved = netstat.read_text()
    netstat.unlink()
    netstat.mkdir()  # reading it fails (EISDIR), not "gone"
    assert sc.records(ENV) == [] and sc.records(ENV) == []
    a = fake.inode("a")
    why = f"{fake.proc}/10/net/netstat: Is a directory"
    assert sc.missed == {a: why}
    assert sc.take_missed() == sc.take_missed() == {str(a): why}  # as long as it stays unreadable
    assert capsys.readouterr().err == (
        f"nettrail collect: could not read the stack counters of network namespace {a} ({why})\n"
    )  # once, not at every read
    netstat.rmdir()
    netstat.write_text(saved)
    fake.counters(10, OutRsts=6)
    assert moved(sc.records(ENV)) == [(a, "OutRsts", 6, 5, 10, "srv")]  # the baseline was kept
    assert sc.missed == {} and sc.take_missed() == {}


def test_a_netns_filter_reads_that_namespace_only(fake):
    fake.process(10, "a")
    fake.process(20, "b")
    fake.counters(10)
    fake.counters(20)
    sc = StackCounters(
        SLOW, scan=lambda: netns.scan(str(fake.proc), str(fake.named)), proc=str(fake.proc), only_netns=fake.inode("b")
    )
    fake.counters(10, OutRsts=3)
    fake.counters(20, OutRsts=4)
    assert [(r.netns, r.delta) for r in sc.records(ENV)] == [(fake.inode("b"), 4)]


def test_a_named_namespace_carries_its_name_and_is_read_through_a_process_in_it(fake):
    fake.process(10, "blue")
    os.link(fake.first["blue"], fake.named / "blue")  # ip netns add: a bind mount of the same nsfs inode
    fake.counters(10)
    sc = fake.reader()
    fake.counters(10, TCPTimeouts=2)
    (r,) = sc.records(ENV)
    assert (r.netns, r.netns_name, r.counter, r.delta, r.pid) == (fake.inode("blue"), "blue", "TCPTimeouts", 2, 10)


def test_the_selected_parser_reads_the_same_values_as_the_full_reader(fake):
    fake.process(10, "a")
    fake.counters(10, ListenOverflows=3, ListenDrops=4, OutRsts=7, InErrs=2)
    paths = [str(fake.proc / "10" / "net" / n) for n in ("netstat", "snmp")]
    every = read_mib(paths)
    out: dict[tuple[str, str], int] = {}
    parser = SelectedParser()
    for p in paths:
        parser.parse(Path(p).read_text(), out)
    assert out == {k: every[k] for k in SELECTED if k in every}
    assert ("TcpExt", "EmbryonicRsts") not in out and out[("TcpExt", "ListenDrops")] == 4


def test_ipv6_frag_fails_are_read_from_snmp6_lines_at_their_start_only():
    out: dict[tuple[str, str], int] = {}
    SelectedParser().parse6(
        "Ip6InReceives 3\nXIp6FragFails 5\nIp6FragFails                    \t7\nIp6FragOKs 2\n", out
    )
    assert out == {("Ip6", "FragFails"): 7}
    SelectedParser().parse6("Ip6FragFails 9\n", out)
    assert out == {("Ip6", "FragFails"): 9}

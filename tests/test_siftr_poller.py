"""siftr-poll's clock and its walk through the network namespaces (collector/bpf/poll.py):
the polls come every interval of the loop's clock, and each poll runs the iterator once in
every namespace it found (entered with setns on the polling thread, which comes back),
or in the one a netns filter names. The kernel side: tests/test_collect_siftr_poll.py."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from collector.bpf import layout, poll
from collector.bpf.loader import Options
from collector.bpf.poll import POLL_PROGRAM, SiftrPoller
from collector.health.reporter import SelfHealth
from translators.kernel import KernelEnv


def here() -> int:
    return os.stat(poll.HOME).st_ino


class Recorder:
    """A session whose iterator notes the namespace it ran in."""

    def __init__(self) -> None:
        self.ran_in: list[int] = []

    def run_iter(self, name: str) -> bool:
        assert name == POLL_PROGRAM
        self.ran_in.append(here())
        return True


def test_polls_come_every_interval_of_the_loop_clock_and_a_late_tick_restarts_the_count() -> None:
    s = Recorder()
    p = SiftrPoller(s, 0.1, now=10.0, scan=dict)
    for t in (10.0, 10.05, 10.1, 10.15, 10.2, 10.25):
        p.tick(t)
    assert p.polls == 3  # at 10.0, 10.1 and 10.2
    p.tick(11.0)  # a tick late by several intervals: one poll, the next an interval later
    p.tick(11.05)
    p.tick(11.1)
    assert p.polls == 5
    assert s.ran_in == [here()] * 5  # no other namespace found: its own only


def test_namespaces_are_found_once_each_from_processes_and_names(tmp_path: Path, monkeypatch) -> None:
    proc, named = tmp_path / "proc", tmp_path / "netns"
    (named).mkdir()
    (named / "blue").write_text("")
    for pid in ("1", "22", "333"):
        (proc / pid / "ns").mkdir(parents=True)
    (proc / "1" / "ns" / "net").write_text("")
    os.link(proc / "1" / "ns" / "net", proc / "22" / "ns" / "net")  # the same namespace
    (proc / "self").mkdir()  # not a pid
    monkeypatch.setattr(poll, "NAMED_NETNS", str(named))
    found = poll.namespaces(str(proc))
    inode = os.stat(proc / "1" / "ns" / "net").st_ino
    assert sorted(found) == sorted([os.stat(named / "blue").st_ino, inode])
    assert found[inode] in (f"{proc}/1/ns/net", f"{proc}/22/ns/net")  # either process enters it


@pytest.mark.skipif(os.geteuid() != 0, reason="entering a network namespace needs CAP_SYS_ADMIN")
def test_each_poll_runs_in_every_namespace_and_the_thread_comes_home() -> None:
    other = subprocess.Popen(["unshare", "-n", "sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        while os.readlink(f"/proc/{other.pid}/exe").endswith("unshare") and time.monotonic() < deadline:
            time.sleep(0.01)  # until unshare has made the namespace and exec'd sleep
        theirs = os.stat(f"/proc/{other.pid}/ns/net").st_ino
        home = here()
        assert theirs != home
        s = Recorder()
        p = SiftrPoller(s, 0.1, now=0.0)
        p.tick(0.0)
        assert theirs in s.ran_in and s.ran_in.count(home) == 1 and len(s.ran_in) == len(set(s.ran_in))
        assert here() == home and p.unreached == {}
        only = SiftrPoller(s := Recorder(), 0.1, now=0.0, only_netns=theirs)  # --filter netns=INODE
        only.tick(0.0)
        assert s.ran_in == [theirs] and here() == home
    finally:
        other.kill()
        other.wait()


class Failing(Recorder):
    def run_iter(self, name: str) -> bool:
        raise RuntimeError("failed to run siftr_poll: Cannot allocate memory")


def test_a_poll_that_fails_is_said_once_and_tracing_goes_on(capsys: pytest.CaptureFixture[str]) -> None:
    p = SiftrPoller(Failing(), 0.1, now=0.0, scan=dict)
    for t in (0.0, 0.1, 0.2):
        p.tick(t)
    assert p.polls == 3
    assert p.unreached == {here(): "this namespace: failed to run siftr_poll: Cannot allocate memory"}
    err = capsys.readouterr().err
    assert err.count("siftr-poll could not poll this namespace") == 1


def test_a_namespace_gone_since_it_was_missed_is_no_longer_said_missed() -> None:
    """poll_missed lists the namespaces the polls cannot reach now, not every one that
    ever failed: the next scan drops those that no longer exist."""
    scans = iter([{4026599999: "/proc/4242/ns/net"}, {}])
    p = SiftrPoller(Recorder(), 0.1, now=0.0, scan=lambda: next(scans))
    p.tick(0.0)
    p.unreached[4026599999] = "/proc/4242/ns/net: Operation not permitted"  # as a refused setns leaves it
    p.tick(poll.RESCAN_S)  # the next scan: the namespace has gone
    assert p.unreached == {}


def test_the_collectors_stats_record_says_the_polls_pace_and_what_they_could_not_reach() -> None:
    """Not only stderr: each collector_stats carries the interval in force and every
    namespace the last polls missed (the Status page shows both)."""
    p = SiftrPoller(Failing(), 0.1, now=0.0, scan=dict)
    p.tick(0.0)
    p.interval_now = 1.6  # stretched, as many namespaces' polls would
    session = SimpleNamespace(opts=Options(providers=("tcp", "siftr-poll")))
    source = SimpleNamespace(session=session, received=np.zeros(layout.EV_MAX, dtype=np.int64), skb_lifetimes=(0, 0),
                             skb_windows=None, counter_records=[], next_flow=0.0, siftr_poller=p)  # fmt: skip
    health = SelfHealth(source, KernelEnv(host_id="h", boot_id="b", wall_offset=0.0))  # type: ignore[arg-type]
    [stats] = [r for r in health.add([], final=True, stopping=True) if r.kind == "collector_stats"]
    assert stats.poll_interval_s == 1.6
    assert stats.poll_missed == {str(here()): "this namespace: failed to run siftr_poll: Cannot allocate memory"}
    source.siftr_poller = None  # siftr-poll not chosen: nothing said about polls
    [stats] = [r for r in health.add([], final=True) if r.kind == "collector_stats"]
    assert (stats.poll_interval_s, stats.poll_missed) == (None, {})


class Slow(Recorder):
    """An iterator that takes 10 ms a run, as 16 namespaces' walks of a big hash would."""

    def run_iter(self, name: str) -> bool:
        time.sleep(0.01)
        return super().run_iter(name)


def test_polls_that_take_long_stretch_the_interval_to_keep_the_pollers_cpu_share(
    capsys: pytest.CaptureFixture[str],
) -> None:
    p = SiftrPoller(Slow(), 0.1, now=0.0, scan=dict)
    p.tick(0.0)
    assert p.interval_now >= 0.01 / poll.POLL_CPU_SHARE  # 0.5 s at least: 2% of a CPU
    for t in (0.1, 0.2, 0.3, 0.4):
        p.tick(t)
    assert p.polls == 1  # the next poll waits for the stretched interval
    p.tick(p.next_poll)
    assert p.polls == 2
    assert "siftr-poll polls every" in capsys.readouterr().err

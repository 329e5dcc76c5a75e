"""siftr-poll's clock: every --poll-interval the collector runs the iterator over the TCP
sockets of each network namespace (kmod/siftr_poll.bpf.c), which writes a siftr sample
of each socket whose control block moved or that has data waiting into the ring.

Per-packet siftr costs its tracepoints' dispatch on every packet of the machine (about
1.2% of the CPU per byte of bulk loopback TCP each, docs/benchmarks.md); a poll costs a
visit per TCP socket per interval, whatever the traffic. What a poll cannot give: the
packet behind a sample (th_seq, th_ack, data_sz) and what happened between two polls
(a window that closed and opened again within the interval).

A TCP iterator walks the namespace its creator is in, so the poller enters each network
namespace that has a process in it or a name under /run/netns (rescanned every
RESCAN_S; collector/netns.py finds them), creates the iterator there and comes back:
setns(2) on the polling thread only.
"""

from __future__ import annotations

import errno
import os
import sys
import time
from collections.abc import Callable
from typing import Protocol

from collector import netns

POLL_PROGRAM = "siftr_poll"
RESCAN_S = 1.0  # seconds between scans for network namespaces
# The poller's own CPU at most (H4): the kernel's TCP iterator walks the whole established
# hash, which all namespaces share, once per namespace (about 0.6 ms each here), so on a
# host with many namespaces a poll that took longer than this share of its interval
# stretches the interval; the H2 ratio (segments per sample) shows the density that results.
POLL_CPU_SHARE = 0.02
NAMED_NETNS = netns.NAMED_NETNS
HOME = netns.HOME  # the polling thread's own namespace


class PolledSession(Protocol):
    def run_iter(self, name: str) -> bool: ...


def namespaces(proc: str = "/proc") -> dict[int, str]:
    """Network namespace inode -> a path that enters it (collector/netns.py finds them)."""
    return {inode: ns.path for inode, ns in netns.scan(proc, NAMED_NETNS).items()}


class SiftrPoller:
    """Runs the poll every `interval_s` in every network namespace (or the one the
    netns filter names), driven by the source's poll loop (tick)."""

    def __init__(
        self, session: PolledSession, interval_s: float, now: float, only_netns: int = 0,
        scan: Callable[[], dict[int, str]] = namespaces,
    ) -> None:  # fmt: skip
        self.session = session
        self.interval_s = interval_s
        self.only_netns = only_netns
        self.scan = scan
        self.next_poll = now  # the first poll at the first tick
        self.next_scan = now
        self.home_netns = os.stat(HOME).st_ino
        self.netns: dict[int, str] = {}
        self.polls = 0
        self.interval_now = interval_s  # the interval in force: stretched by polls that took long
        self.unreached: dict[int, str] = {}  # netns inode -> why it could not be polled (the last time)

    def tick(self, now: float) -> None:
        if now < self.next_poll:
            return
        if now >= self.next_scan:
            self.netns = self.scan()
            self.next_scan = now + RESCAN_S
            # a namespace gone since it was missed is no longer one (collector_stats.poll_missed)
            self.unreached = {i: why for i, why in self.unreached.items() if i in self.netns or i == self.home_netns}
        started = time.perf_counter()
        self.poll_all()
        self.polls += 1
        self.pace(time.perf_counter() - started)
        # the next one an interval after this one was due; a late tick starts the count again
        self.next_poll += self.interval_now
        if self.next_poll <= now:
            self.next_poll = now + self.interval_now

    def pace(self, took: float) -> None:
        """The interval for a poll that took `took` seconds: --poll-interval, or longer so
        that polling costs at most POLL_CPU_SHARE of a CPU (said when it changes much)."""
        wanted = max(self.interval_s, took / POLL_CPU_SHARE)
        if wanted > 2 * self.interval_now or (wanted == self.interval_s < self.interval_now):
            print(f"nettrail collect: siftr-poll polls every {wanted:.2g} s ({len(self.netns) or 1} network "
                  f"namespaces, {took * 1000:.1f} ms a poll)", file=sys.stderr, flush=True)  # fmt: skip
        self.interval_now = wanted

    def poll_all(self) -> None:
        if not self.only_netns or self.only_netns == self.home_netns:
            self.run_here(self.home_netns, "this namespace")
        for inode, path in self.netns.items():
            if inode == self.home_netns or self.only_netns not in (0, inode):
                continue
            try:
                with netns.entered(path, inode) as inside:  # gone or reused since the scan: nothing
                    if inside:
                        self.run_here(inode, path)
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ESRCH):  # not gone: say why
                    why = f"{path}: {exc.strerror}"
                    if self.unreached.get(inode) != why:
                        print(f"nettrail collect: siftr-poll could not enter {why}", file=sys.stderr, flush=True)
                    self.unreached[inode] = why

    def run_here(self, inode: int, where: str) -> None:
        """The iterator in the thread's current namespace; a failure is kept and said once
        (on the collector's stderr), never the end of tracing."""
        try:
            self.session.run_iter(POLL_PROGRAM)
        except (OSError, RuntimeError) as exc:
            why = f"{where}: {exc}"
            if self.unreached.get(inode) != why:
                print(f"nettrail collect: siftr-poll could not poll {why}", file=sys.stderr, flush=True)
            self.unreached[inode] = why
            return
        self.unreached.pop(inode, None)

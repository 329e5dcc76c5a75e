"""The TCP MIB counters (`nstat`'s set, selected) of every network namespace of the host,
read once a second: a ``stack_counter`` record per counter that moved, per namespace.

The namespaces are those collector/netns.py finds (a process in it, or a name under
/run/netns), rescanned at every read. A namespace with a process is read through
/proc/PID/net/{netstat,snmp} of its lowest pid (no setns; the pid is checked to be still in
it after the read); a named one with no process is entered with setns on the reading thread
and read through /proc/thread-self/net.

Baselines: the namespaces found at the start are read once without records (their history
before the collector is not this run's). A namespace first seen later was created since
(or only now gained its first process or name): its counters count from zero, so what it
did between its creation and its first read is reported, not lost to a baseline. The cost
of that rule: a namespace that existed with no process and no name (kept by a descriptor or
a bind mount elsewhere) and gains one later reports its whole history in its first read;
one that was seen, lost its processes and gains one again goes on from its last read (the
graveyard). A counter that fell since then means a new namespace got the freed inode
number: it counts from zero.

A namespace that cannot be read is said on stderr once per reason and kept in ``missed``
(its baseline stays, so its next good read reports everything meanwhile); one that is gone
is said on stderr: its moves since its last read are unread. Both reach the next
collector_stats record as ``counters_missed`` (take_missed). Reading costs at most
CPU_SHARE of a CPU: a slower round stretches the interval (said on stderr).

When a namespace's ListenOverflows moved, its listeners whose accept queue is full come
just before that counter's record, as ``sock_event`` listen-overflow records
(collector/listen_queues.py): the finding names the listener, not only the namespace.

Keep in sync with: analysis/alerts/live.py (Extras adds these records), the K4 rule
(analysis/alerts/rules/buffers.py), docs/collector.md "Stack counters".
"""

from __future__ import annotations

import errno
import sys
import time
from collections.abc import Callable, Iterable

from collector import netns
from collector.listen_queues import Listener, ListenQueues
from translators.kernel import KernelEnv, KernelRecord, collector_envelope
from translators.records import StackCounter

# The counters worth a record when they move (docs/collector.md says why each one), in the
# order each namespace's records come: ListenDrops before ListenOverflows, so K4 knows both
# when the overflow record arrives.
STACK_COUNTERS: dict[str, tuple[str, ...]] = {
    "TcpExt": (
        "ListenDrops",
        "ListenOverflows",
        "TCPTimeouts",
        "SyncookiesSent",
        "TCPBacklogDrop",
        "TCPZeroWindowDrop",
        "TCPRcvQDrop",
        "TCPAbortOnMemory",
        "TCPReqQFullDrop",
    ),
    "Tcp": ("AttemptFails", "EstabResets", "InErrs", "OutRsts"),
    "Ip": ("FragFails",),  # packets a hop could not forward for their size (DF set): K2 pmtu-black-hole
    "Ip6": ("FragFails",),  # the same for IPv6 (nstat's Ip6FragFails, one "name value" line in snmp6)
}
OVERFLOWS = ("TcpExt", "ListenOverflows")
MIB_FILES = {"TcpExt": "netstat", "Tcp": "snmp", "Ip": "snmp", "Ip6": "snmp6"}  # group -> its file under /proc/.../net/
SELECTED = [(group, name) for group, names in STACK_COUNTERS.items() for name in names]
INTERVAL_S = 1.0
CPU_SHARE = 0.02  # the reads' own CPU at most, as siftr-poll's polls (collector/bpf/poll.py)
PROG = "nettrail collect"
GRAVEYARD = 4096  # last counters of namespaces no longer found, kept in case one comes back

Counts = dict[tuple[str, str], int]


def read_mib(paths: Iterable[str] = ("/proc/net/netstat", "/proc/net/snmp")) -> Counts:
    """(group, name) -> value of every counter in MIB files (header/value line pairs)."""
    out: Counts = {}
    for path in paths:
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for names, values in zip(lines[::2], lines[1::2], strict=False):
            group, _, head = names.partition(":")
            _, _, vals = values.partition(":")
            for name, value in zip(head.split(), vals.split(), strict=False):
                out[(group, name)] = int(value)
    return out


class SelectedParser:
    """The selected counters of a MIB file's text: every namespace of a kernel has the same
    header lines, so each header's positions of the selected names are found once."""

    def __init__(self) -> None:
        self.positions: dict[str, list[tuple[int, tuple[str, str]]]] = {}
        self.wanted = set(SELECTED)

    def parse(self, text: str, out: Counts) -> None:
        lines = text.split("\n")
        for names, values in zip(lines[::2], lines[1::2], strict=False):
            where = self.positions.get(names)
            if where is None:
                group, _, head = names.partition(":")
                keys = ((group, n) for n in head.split())
                where = self.positions[names] = [(i, k) for i, k in enumerate(keys) if k in self.wanted]
            if where:
                vals = values.partition(":")[2].split()
                for i, key in where:
                    out[key] = int(vals[i])

    def parse6(self, text: str, out: Counts) -> None:
        """/proc/net/snmp6: one "Ip6FragFails   N" line per counter (no header lines)."""
        for group, name in self.wanted:
            if group != "Ip6":
                continue
            word = f"{group}{name} "
            at = text.find(word)
            while at > 0 and text[at - 1] != "\n":  # only at a line's start
                at = text.find(word, at + 1)
            if at != -1:
                out[(group, name)] = int(text[at:].split(None, 2)[1])


class Gone(Exception):
    """The namespace is no longer there (its processes exited, its name was removed)."""


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


class StackCounters:
    """Reads every namespace's selected counters each `interval_s`; records what moved."""

    def __init__(
        self, interval_s: float = INTERVAL_S, scan: Callable[[], dict[int, netns.Netns]] = netns.scan,
        proc: str = "/proc", only_netns: int = 0, listen_filter: Callable[[Listener], bool] | None = None,
    ) -> None:  # fmt: skip
        self.listen_filter = listen_filter  # the listeners whose queue is recorded (listen_queues.filter_for)
        self.interval_s = interval_s
        self.interval_now = interval_s  # stretched when a round took more than CPU_SHARE of it
        self.only_netns = only_netns  # --filter netns=INODE: that namespace only
        self._scan = scan
        self.proc = proc
        self.parser = SelectedParser()
        self.seen: dict[int, Counts] = {}  # netns inode -> counters at its last good read
        self.missed: dict[int, str] = {}  # netns inode -> why its last read failed
        self.gone: dict[int, str] = {}  # netns inode -> gone since the last take_missed()
        # netns inode -> counters at its last read, for namespaces no longer found: one kept
        # alive unseen (a bind mount elsewhere) that gains a process again goes on from there
        self.graveyard: dict[int, Counts] = {}
        self.found = self.scan()
        self.at_start = set(self.found)  # baseline only; any later one counts from zero
        self.comms: dict[tuple[int, int], str | None] = {}  # (netns, pid) -> comm
        # full listeners when ListenOverflows moved; every listener's queue when it moved
        self.listen_queues = ListenQueues(proc)
        for ns in self.found.values():
            self._reading(ns)  # baselines
        self.next = time.monotonic() + interval_s

    def scan(self) -> dict[int, netns.Netns]:
        found = self._scan()
        if self.only_netns:
            return {i: ns for i, ns in found.items() if i == self.only_netns}
        return found

    def due(self, final: bool) -> bool:
        return final or time.monotonic() >= self.next

    def records(self, env: KernelEnv) -> list[KernelRecord]:
        started = time.perf_counter()
        found = self.scan()
        for inode in [i for i in self.seen if i not in found]:
            self._gone(inode, self.found.get(inode))
            self.listen_queues.forget(inode)
        self.found = found
        self.missed = {i: why for i, why in self.missed.items() if i in found}
        out: list[KernelRecord] = []
        ts_ns = time.monotonic_ns()  # one read stamps the whole batch
        for inode, ns in found.items():
            before = self.seen.get(inode)
            if before is None:
                before = self.graveyard.get(inode)
            got = self._reading(ns)
            if got is None:
                continue
            self.graveyard.pop(inode, None)
            now, pid = got
            if before is None and inode in self.at_start:
                continue  # unreadable at the start: this is its baseline
            if before is None or any(now.get(k, 0) < v for k, v in before.items()):
                before = {}  # created since the last read (a counter that fell: a new one with a freed inode)
            out.extend(self._moved(env, ts_ns, ns, pid, before, now))
            # each listener's accept queue and backlog, when they moved (a LISTEN row's queue)
            out.extend(self.listen_queues.changed(env, ts_ns, ns, self.listen_filter))
        self.pace(time.perf_counter() - started)
        self.next = time.monotonic() + self.interval_now
        return out

    def _moved(
        self, env: KernelEnv, ts_ns: int, ns: netns.Netns, pid: int | None, before: Counts, now: Counts
    ) -> list[KernelRecord]:
        out: list[KernelRecord] = []
        for key in SELECTED:
            value = now.get(key)
            if value is None:
                continue
            delta = value - before.get(key, 0)
            if delta <= 0:
                continue
            group, name = key
            if key == OVERFLOWS:
                # the full listeners first, so K4 names them when the counter's record arrives
                out.extend(self.listen_queues.records(env, ts_ns, ns))
            out.append(
                StackCounter(
                    **collector_envelope(env, "stack-counter", f"/proc/net/{MIB_FILES[group]}", "linux", ts_ns),
                    netns=ns.inode,
                    pid=pid,
                    tgid=pid,
                    comm=self._comm(ns.inode, pid),
                    netns_name=ns.name,
                    mib=group,
                    counter=name,
                    value=value,
                    delta=delta,
                )  # fmt: skip
            )
        return out

    def _reading(self, ns: netns.Netns) -> tuple[Counts, int | None] | None:
        """The namespace's counters and the pid read through (None: entered by name); a
        failure is said and kept in `missed`, a namespace gone since the scan forgotten."""
        try:
            now, pid = self._read_ns(ns)
        except Gone:
            self._gone(ns.inode, ns)
            return None
        except (OSError, RuntimeError) as exc:
            if isinstance(exc, OSError) and exc.strerror:
                why = f"{exc.filename or ns.path}: {exc.strerror}"
            else:
                why = f"{ns.path}: {exc}"
            if self.missed.get(ns.inode) != why:
                print(f"{PROG}: could not read the stack counters of network namespace {ns.inode} ({why})",
                      file=sys.stderr, flush=True)  # fmt: skip
            self.missed[ns.inode] = why
            return None
        self.missed.pop(ns.inode, None)
        self.seen[ns.inode] = now
        return now, pid

    def _read_ns(self, ns: netns.Netns) -> tuple[Counts, int | None]:
        for pid in ns.pids:
            out: Counts = {}
            try:
                for part in ("netstat", "snmp"):
                    self.parser.parse(_read(f"{self.proc}/{pid}/net/{part}"), out)
            except OSError as exc:
                # exited since the scan, or its namespace is being torn down (ENXIO: the
                # proc file's namespace has no reference left): the next process of it
                if exc.errno in (errno.ENOENT, errno.ESRCH, errno.ENXIO):
                    continue
                raise
            self._read6(f"{self.proc}/{pid}/net/snmp6", out)
            if netns.netns_inode(f"{self.proc}/{pid}/ns/net") == ns.inode:
                return out, pid
            # it left the namespace (or its pid was reused): the next one
        if ns.name is None:
            raise Gone
        try:
            with netns.entered(ns.path, ns.inode) as inside:
                if not inside:
                    raise Gone
                out = {}
                for part in ("netstat", "snmp"):
                    self.parser.parse(_read(f"/proc/thread-self/net/{part}"), out)
                self._read6("/proc/thread-self/net/snmp6", out)
                return out, None
        except FileNotFoundError as exc:
            raise Gone from exc

    def _read6(self, path: str, out: Counts) -> None:
        """IPv6's counters, when the kernel has IPv6 (no snmp6 without it: nothing to read)."""
        try:
            self.parser.parse6(_read(path), out)
        except OSError:
            pass  # no IPv6, or the process exited after its other files were read

    def _gone(self, inode: int, ns: netns.Netns | None) -> None:
        self.at_start.discard(inode)  # a namespace made later may get its inode number
        last = self.seen.pop(inode, None)
        if last is not None:
            self.graveyard[inode] = last
            if len(self.graveyard) > GRAVEYARD:
                del self.graveyard[next(iter(self.graveyard))]  # the longest gone
            label = f" ({ns.name})" if ns is not None and ns.name else ""
            why = (
                f"network namespace {inode}{label} is gone: its stack counters' moves since their last read are unread"
            )
            print(f"{PROG}: {why}", file=sys.stderr, flush=True)
            self.gone[inode] = why
        self.missed.pop(inode, None)

    def take_missed(self) -> dict[str, str]:
        """collector_stats.counters_missed: the namespaces unreadable now, and those gone
        since the last call (each said once)."""
        out = {str(i): why for i, why in sorted({**self.gone, **self.missed}.items())}
        self.gone = {}
        return out

    def _comm(self, inode: int, pid: int | None) -> str | None:
        if pid is None:
            return None
        key = (inode, pid)
        if key not in self.comms:
            if len(self.comms) > 4096:  # pids come and go: keep the cache small
                self.comms.clear()
            try:
                self.comms[key] = _read(f"{self.proc}/{pid}/comm").strip()
            except OSError:
                self.comms[key] = None
        return self.comms[key]

    def pace(self, took: float) -> None:
        """Reads cost at most CPU_SHARE of a CPU: a round that took longer stretches the
        interval (said when it changes much)."""
        wanted = max(self.interval_s, took / CPU_SHARE)
        if wanted > 2 * self.interval_now or (wanted == self.interval_s < self.interval_now):
            print(f"{PROG}: stack counters read every {wanted:.2g} s ({len(self.found)} network namespaces, "
                  f"{took * 1000:.1f} ms a round)", file=sys.stderr, flush=True)  # fmt: skip
        self.interval_now = wanted

"""Grouped findings: many sockets, one cause, one alert (issue 34 item 1).

A rule that used to fire per socket (K2 SYN retries and timeouts, K8 connect timeouts)
fires instead for the socket's *fix target* (the destination it connects to) and keeps
here the sockets the finding struck while it was open: how many, each one's worst value,
and the first ``MAX_MEMBER_CONNS`` connection ids, which the alert carries as
``members`` / ``member_conn_uuids`` so the dashboard links to each socket's own page.
Per-socket detail stays in the records of those connections.

Keep in sync with book.py (members on Alert), the rules that use it (retrans.py,
states.py, stuck_close.py, buffers.py, perf.py) and docs/alerts.md ("Grouping").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields

from ..book import MAX_MEMBER_CONNS, AlertBook, Subject
from ..state import LruMap
from .base import who

# Sockets remembered per group for their worst value; beyond, only counted (a group
# of a million sockets stays bounded; its count and the first ids remain exact).
MAX_TRACKED = 4096


@dataclass(slots=True)
class Members:
    subject: Subject
    worst: dict[object, float] = field(default_factory=dict)
    conns: list[str] = field(default_factory=list)
    total: int = 0
    peak: float = 0.0

    def add(self, key: object, conn: str | None, value: float) -> None:
        if key in self.worst:
            self.worst[key] = max(self.worst[key], value)
        else:
            self.total += 1
            if len(self.worst) < MAX_TRACKED:
                self.worst[key] = value
            if conn is not None and len(self.conns) < MAX_MEMBER_CONNS:
                self.conns.append(conn)
        self.peak = max(self.peak, value)


class Groups:
    """Per (host, condition, target): the members of the rule's open finding for it.

    ``join`` starts afresh when the book has no open alert for the key any more (it
    closed): a new episode counts its own sockets.
    """

    def __init__(self, rule_id: str, book: AlertBook, cap: int) -> None:
        self.rule_id = rule_id
        self.book = book
        self.groups: LruMap[tuple[str, str, object], Members] = LruMap(cap)

    def join(
        self, condition: str, target: object, subject: Subject, key: object, conn: str | None, value: float,
        make: Callable[[Subject], Subject],
    ) -> Members:  # fmt: skip
        gk = (subject.host_id, condition, target)
        group = self.groups.get(gk)
        if group is None or not self.book.is_open(self.rule_id, condition, subject.host_id, target):
            group = Members(make(subject))
            self.groups.put(gk, group)
        elif (group.subject.tgid or group.subject.pid) != (subject.tgid or subject.pid):
            # callers from several processes: the finding is about the target, not one of them
            group.subject.pid = group.subject.tgid = None
            group.subject.comm = None
        group.add(key, conn, value)
        return group


def target_subject(s: Subject) -> Subject:
    """A destination's finding: the host, the caller while there is one, the remote end."""
    return Subject(
        host_id=s.host_id, boot_id=s.boot_id, pid=s.tgid or s.pid, tgid=s.tgid or s.pid, comm=s.comm,
        netns=s.netns, proto=s.proto, ip_ver=s.ip_ver, dst=s.dst, dport=s.dport,
    )  # fmt: skip


def callers(s: Subject, n: int) -> str:
    """Who the sockets belong to, for a sentence: one process, or several."""
    if s.comm:
        return f"{n} connection{'s' if n > 1 else ''} of {who(s)}"
    return f"{n} connection{'s' if n > 1 else ''} on this host"


def keep_subject(store: LruMap[object, Subject], key: object, new: Subject) -> Subject:
    """The finding's one subject object, rewritten with ``new``'s fields: the book keeps the
    object of a finding's first firing, so a finding that starts with one socket (that
    socket's subject) and then gains members must change that object, not pass another."""
    kept = store.get(key)
    if kept is None:
        store.put(key, new)
        return new
    for f in fields(Subject):
        setattr(kept, f.name, getattr(new, f.name))
    return kept

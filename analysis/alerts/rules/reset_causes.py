"""Why a RST was received (issue 34 item 2): which side sent it and the kernel's reason.

A RST that a socket of this host received (``tcp_reset``, sender peer) is matched with the
RST this host's TCP stack sent for the same connection (sender local, the reversed tuple,
within ``MATCH_S``, in either order: the receiver's tracepoint may fire first). Then the
peer is on this host (another network namespace, or the same) and its record says why:
the kernel's reset reason (tcp_send_reset's reason, Linux 6.10+), a reply for no socket
(nothing listens), or an active reset of its application. A peer address that is a local
address of this host (seen as the local side of a socket record) whose stack sent no RST
had it forged on the way: a firewall rule (reject with tcp reset) or a middlebox. Any
other peer: the peer or a middlebox, which this host cannot tell apart.

``ResetSources`` does the matching; ``ResetCauses`` counts a destination's RSTs per cause
over a window and says them. Used by K3 (rules/resets.py). Keep in sync with
docs/alerts.md (K3).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from translators.records import Record, TcpReset, TcpStateChange

from ..state import LruMap, Window

MATCH_S = 1.0
UNSPECIFIED = frozenset({"0.0.0.0", "::"})
REASON_WORDS = {
    "NO_SOCKET": "no socket for the segment: nothing listens on the port, or the connection is gone",
    "TCP_STATE": "the socket was closed or disconnected in a state that requires a reset",
    "TCP_ABORT_ON_CLOSE": "the application closed with unread data",
    "TCP_ABORT_ON_LINGER": "the application closed with SO_LINGER 0",
    "TCP_ABORT_ON_DATA": "data arrived after the application closed",
    "TCP_ABORT_ON_MEMORY": "the host ran out of TCP memory",
    "TCP_DISCONNECT_WITH_DATA": "the application disconnected with unread data",
    "TCP_KEEPALIVE_TIMEOUT": "keep-alive probes went unanswered",
    "TCP_TIMEWAIT_SOCKET": "a segment for a connection in TIME_WAIT",
    "INVALID_SYN": "an unacceptable SYN",
}


def reason_words(reason: str | None, active: bool | None) -> str:
    """The kernel's reason, named as it spells it and said in words."""
    words = REASON_WORDS.get(reason or "", "an unacceptable segment" if reason else "")
    who = "an active reset of its application" if active else ""
    said = "; ".join(w for w in (words, who) if w)
    if reason and reason != "NOT_SPECIFIED":
        return f"reason {reason}" + (f" ({said})" if said else "")
    return said or "no reason given"


@dataclass(slots=True)
class _Received:
    rec: TcpReset
    dest: tuple[object, ...]
    cause: str


class ResetSources:
    """Local RSTs sent, received ones waiting for theirs, and this host's local addresses."""

    def __init__(self, cap: int) -> None:
        self.sent: LruMap[tuple[object, ...], TcpReset] = LruMap(cap)
        self.waiting: LruMap[tuple[object, ...], _Received] = LruMap(cap)
        self.addrs: LruMap[tuple[str, str], bool] = LruMap(cap)

    def note_local(self, rec: Record) -> None:
        """The local side of a socket record: an address of this host."""
        if isinstance(rec, TcpStateChange | TcpReset) and rec.src and rec.src not in UNSPECIFIED:
            if not isinstance(rec, TcpReset) or rec.sender == "local":
                self.addrs.put((rec.host_id, rec.src), True)

    def sent_rst(self, rec: TcpReset) -> _Received | None:
        """A RST this host's stack sent; the received one it answers, if that came first."""
        key = (rec.host_id, rec.src, rec.sport, rec.dst, rec.dport)
        self.sent.put(key, rec)
        got = self.waiting.pop(key)
        return got if got is not None and rec.ts_wall - got.rec.ts_wall <= MATCH_S else None

    def received_rst(self, rec: TcpReset, dest: tuple[object, ...], phase: str) -> str:
        """The cause of a RST a socket of this host received (a ResetCauses label)."""
        key = (rec.host_id, rec.dst, rec.dport, rec.src, rec.sport)
        sent = self.sent.peek(key)
        if sent is not None and rec.ts_wall - sent.ts_wall <= MATCH_S:
            return stack_cause(phase, sent)
        local = rec.dst is not None and self.addrs.peek((rec.host_id, rec.dst)) is not None
        cause = f"{phase}|forged" if local else f"{phase}|remote"
        self.waiting.put(key, _Received(rec, dest, cause))
        return cause


def stack_cause(phase: str, sent: TcpReset) -> str:
    return f"{phase}|stack|{sent.src}|{sent.netns}|{reason_words(sent.reason, sent.active)}"


@dataclass(slots=True)
class ResetCauses:
    """A destination's received RSTs per cause over a window."""

    span: float
    by_cause: dict[str, Window] = field(default_factory=dict)

    def add(self, t: float, cause: str, n: float = 1.0) -> None:
        if cause in self.by_cause or len(self.by_cause) < 16:
            self.by_cause.setdefault(cause, Window(self.span)).add(t, n)

    def sentence(self, t: float, peer: str | None) -> str:
        parts = []
        for cause, w in sorted(self.by_cause.items()):
            n = int(w.total(t))
            if n <= 0:
                continue
            phase, source, *rest = cause.split("|")
            what = "refused during the handshake" if phase == "refused" else "aborted later"
            if source == "stack":
                addr, netns, words = rest
                parts.append(
                    f"{n} {what}: the TCP stack of {addr} (network namespace {netns} of this host) sent "
                    f"{'it' if n == 1 else 'them'}, {words}"
                )
            elif source == "forged":
                parts.append(
                    f"{n} {what}: no RST left the TCP stack of {peer}, an address of this host: a firewall rule "
                    f"(reject with tcp reset) or a middlebox sent {'it' if n == 1 else 'them'}"
                )
            else:
                parts.append(f"{n} {what}: sent by {peer} or a middlebox on the way (not on this host)")
        return (" Why: " + "; ".join(parts) + ".") if parts else ""

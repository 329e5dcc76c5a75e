"""Why a connect failed, as far as the kernel tells (issue 34 item 2): refused (the peer
answered the SYN with a RST), every SYN dropped on this host (the ``skb_drop`` records of
the connecting socket, with their drop reason and place), the SYNs sent and never answered
(dropped upstream, or the destination is down), or closed before the first SYN retry
without any answer (the application gave up, or an ICMP error such as "host unreachable"
ended it: the kernel passes no reason to the state change).

``ConnectCauses`` follows each live connect from SYN_SENT to its outcome; ``Causes`` keeps
a destination's failed attempts per cause over a window, and says them in one sentence.
Used by K14 (rules/handshakes.py, one finding per destination service) and K8's
connect-timeout (rules/states.py). A connect() that fails before any SYN (no route:
ENETUNREACH from the routing lookup) never reaches SYN_SENT and leaves no record.
Keep in sync with docs/alerts.md (K14, K8).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from translators.records import Record, SkbDrop, TcpReset, TcpRetransmit, TcpStateChange

from ..state import LruMap, Window
from .base import endpoint, flow_key

# Closed before the first SYN retry (Linux waits 1 s): not a timeout of the kernel's.
EARLY_S = 0.9
CAUSES = ("refused", "dropped", "unanswered", "early")


@dataclass(slots=True)
class Attempt:
    """One connect in flight: when it began, SYNs sent, SYNs dropped here by reason."""

    since: float
    syns: int = 1
    drops: dict[str, int] = field(default_factory=dict)
    refused: bool = False
    rst_reason: str | None = None

    def cause(self, now: float) -> str:
        """refused, dropped (every SYN dropped on this host), unanswered or early."""
        if self.refused:
            return "refused"
        if self.drops and sum(self.drops.values()) >= self.syns:
            return "dropped"
        if now - self.since < EARLY_S and self.syns <= 1:
            return "early"
        return "unanswered"


def drop_place(rec: SkbDrop) -> str:
    """A drop's reason, kernel function and namespace: "NETFILTER_DROP at nft_do_chain in network namespace N"."""
    where = rec.drop_location.split("+", 1)[0] if rec.drop_location else None
    out = f"{rec.drop_reason_str} at {where}" if where else rec.drop_reason_str
    return f"{out} in network namespace {rec.netns}" if rec.netns is not None else out


class ConnectCauses:
    """Live connects (SYN_SENT) and the evidence of why they end. A SYN dropped by the
    connecting socket's own stack carries its connection id; one dropped in another
    namespace of this host (a server's or a router's input, after the veth) carries only
    the tuple, and is matched to the attempt by it when the attempt ends."""

    LOOSE_PER_TUPLE = 64

    def __init__(self, cap: int) -> None:
        self.pending: LruMap[object, Attempt] = LruMap(cap)
        self.loose: LruMap[tuple[object, ...], list[tuple[float, str]]] = LruMap(cap)

    def feed(self, rec: Record) -> tuple[str, Attempt | None] | None:
        """("success" | "failed", the attempt) when a connect ends, else None."""
        if isinstance(rec, TcpStateChange):
            if rec.state == "SYN_SENT":
                self.pending.put(flow_key(rec), Attempt(rec.ts_wall))
                return None
            if rec.prev_state != "SYN_SENT":
                return None
            attempt = self.pending.pop(flow_key(rec))
            if rec.state == "ESTABLISHED":
                return "success", attempt
            if rec.state == "CLOSED":
                if attempt is not None:
                    self._match_loose(rec, attempt)
                return "failed", attempt
            return None
        if isinstance(rec, SkbDrop):
            if rec.l4_proto != "tcp":
                return None
            if rec.conn_uuid is not None:
                attempt = self.pending.peek(flow_key(rec))
                if attempt is not None:
                    key = drop_place(rec)
                    attempt.drops[key] = attempt.drops.get(key, 0) + 1
            elif rec.sport and rec.dport:
                tup = (rec.host_id, rec.src, rec.sport, rec.dst, rec.dport)
                seen = self.loose.get_or_create(tup, list)
                if len(seen) < self.LOOSE_PER_TUPLE:
                    seen.append((rec.ts_wall, drop_place(rec)))
        elif isinstance(rec, TcpRetransmit):
            if rec.state == "SYN_SENT" or rec.retrans_kind == "syn":
                attempt = self.pending.peek(flow_key(rec))
                if attempt is not None:
                    attempt.syns += 1
        elif isinstance(rec, TcpReset) and rec.sender == "peer" and rec.state == "SYN_SENT":
            attempt = self.pending.get_or_create(flow_key(rec), lambda: Attempt(rec.ts_wall))
            attempt.refused = True
            attempt.rst_reason = rec.reason
        return None

    def _match_loose(self, rec: TcpStateChange, attempt: Attempt) -> None:
        seen = self.loose.pop((rec.host_id, rec.src, rec.sport, rec.dst, rec.dport))
        for t, key in seen or ():
            if t >= attempt.since:
                attempt.drops[key] = attempt.drops.get(key, 0) + 1


@dataclass(slots=True)
class Causes:
    """A destination's failed attempts per cause, SYNs sent and dropped, over a window."""

    span: float
    attempts: dict[str, Window] = field(default_factory=dict)
    syns: dict[str, Window] = field(default_factory=dict)
    drops: dict[str, Window] = field(default_factory=dict)

    def add(self, t: float, cause: str, attempt: Attempt) -> None:
        self.attempts.setdefault(cause, Window(self.span)).add(t)
        self.syns.setdefault(cause, Window(self.span)).add(t, attempt.syns)
        for where, n in attempt.drops.items():
            if len(self.drops) < 16 or where in self.drops:
                self.drops.setdefault(where, Window(self.span)).add(t, n)

    def count(self, cause: str, t: float) -> int:
        w = self.attempts.get(cause)
        return int(w.total(t)) if w is not None else 0

    def sentence(self, t: float, dst: str | None, dport: int | None) -> str:
        """ "Why: ..." naming each cause seen in the window with its numbers ("" if none)."""
        parts: list[str] = []
        host = dst or "the destination"
        n = self.count("refused", t)
        if n:
            parts.append(
                f"{n} refused: {host} answered the SYN with a RST (nothing listens on {endpoint(dst, dport)}, or a "
                f"firewall there rejects it)"
            )
        n = self.count("dropped", t)
        if n:
            drops = ", ".join(f"{w} ({int(win.total(t))})" for w, win in sorted(self.drops.items()) if win.total(t))
            parts.append(f"{n} timed out with every SYN dropped on this host: {drops}")
        n = self.count("unanswered", t)
        if n:
            syns = int(self.syns["unanswered"].total(t))
            parts.append(
                f"{n} timed out with {syns} SYNs sent and none answered: dropped upstream, or {host} is down or gone"
            )
        n = self.count("early", t)
        if n:
            parts.append(
                f"{n} closed before the first SYN retry without an answer: the application gave up, or an ICMP "
                f"error (unreachable) ended the attempt"
            )
        return (" Why: " + "; ".join(parts) + ".") if parts else ""


def timeout_cause(attempt: Attempt | None, now: float) -> str | None:
    """K8's words for a connect that timed out with every SYN dropped on this host (None:
    nothing dropped here, so the SYNs left and the peer or the path is silent)."""
    if attempt is None or attempt.cause(now) != "dropped":
        return None
    drops = ", ".join(f"{w} ({n})" for w, n in sorted(attempt.drops.items()))
    return f"the latest one's {attempt.syns} SYNs were all dropped on this host: {drops}."

"""tcp --tcp-fold for the rules: a tcp_lifecycle is fed to them as the records the socket
streams without the fold (translators/tcp_lifecycle.py, expand()), in the order it streams
them, so every rule that reads tcp_state, tcp_cong_state, flow_counters or connection
(handshakes, K10 CLOSE_WAIT, the sampling report) sees a folded socket's transitions as a
streamed one's. Each part carries the lifecycle's seq (the record that brought it) and its
own time: a change's time in the kernel, not the lifecycle's arrival (docs/record-path.md,
step 2; tests/test_alerts_tcp_fold.py, tests/test_alerts_tcp_fold_kernel.py).

A folded socket's resets and retransmissions are never folded: they reach the engine
before the changes around them (a refused connect's RST before its SYN_SENT). Once the
engine folds (a lifecycle seen, or told so), Unfold holds a socket's resets and
retransmissions that come before any change of it, for at most HOLD_S of record time, and
feeds them in time order with its lifecycle's changes when that comes, or before its
first streamed change, or when the hold is up (a socket traced from before the collector
started, whose changes never come). Rules that pair a reset with the socket's state
(K8's refused against timed-out connects, K3's peers) then see what they see streamed.
"""

from __future__ import annotations

from collections import OrderedDict

from translators.records import Record, TcpLifecycle, TcpReset, TcpRetransmit, TcpStateChange
from translators.tcp_lifecycle import expand_shared

# a folded socket's changes come within --fold-window (1 s by default) of its first and at
# its end, which a refused or reset socket reaches at once: held records wait this long
HOLD_S = 3.0
MAX_HELD = 10_000  # sockets with held records; the oldest is let go first
MAX_KNOWN = 200_000  # sockets whose changes were seen (their resets are fed at once)
_EARLY = (TcpReset, TcpRetransmit)


def parts(record: TcpLifecycle) -> list[Record]:
    out = expand_shared(record)  # the live summary's, in the collector (the same objects)
    for part in out:
        part.seq = record.seq
    return out


class Unfold:
    """Routes an engine's records: a lifecycle becomes its parts, in time order with what
    its socket streamed before them; see the module's docstring."""

    def __init__(self, hold_s: float = HOLD_S) -> None:
        self.hold_s = hold_s
        self.held: OrderedDict[int, list[Record]] = OrderedDict()  # cookie -> early records, oldest first
        self.known: OrderedDict[int, None] = OrderedDict()  # cookies whose changes came

    def route(self, rec: Record) -> list[Record]:
        """What to feed the rules now, in order, for `rec`."""
        out = self.due(rec.ts_wall)
        cls = type(rec)
        cookie = rec.sock_cookie or 0
        if cls is TcpLifecycle:
            early = self.held.pop(cookie, [])
            self._know(cookie)
            out += _in_time_order(early, parts(rec))  # type: ignore[arg-type]
        elif cls is TcpStateChange and cookie:
            out += self.held.pop(cookie, [])
            self._know(cookie)
            out.append(rec)
        elif cls in _EARLY and cookie and cookie not in self.known:
            self.held.setdefault(cookie, []).append(rec)
            if len(self.held) > MAX_HELD:
                out += self.held.popitem(last=False)[1]
        else:
            out.append(rec)
        return out

    def due(self, now: float) -> list[Record]:
        """The held records whose hold is up at `now`, oldest socket first."""
        out: list[Record] = []
        held = self.held
        while held:
            cookie, recs = next(iter(held.items()))
            if recs[0].ts_wall > now - self.hold_s:
                break
            del held[cookie]
            out += recs
        return out

    def rest(self) -> list[Record]:
        """Everything still held (the stream ended)."""
        out = [rec for recs in self.held.values() for rec in recs]
        self.held.clear()
        return out

    def _know(self, cookie: int) -> None:
        known = self.known
        known[cookie] = None
        known.move_to_end(cookie)
        if len(known) > MAX_KNOWN:
            known.popitem(last=False)


def _in_time_order(early: list[Record], later: list[Record]) -> list[Record]:
    """`early` (streamed, exact times) merged with a lifecycle's parts (times floored to the
    microsecond): within one microsecond, what streamed came first."""
    timed = [(r.ts_ns // 1000, 0, i, r) for i, r in enumerate(early)]
    timed += [(r.ts_ns // 1000, 1, i, r) for i, r in enumerate(later)]
    return [r for *_, r in sorted(timed, key=lambda t: t[:3])]

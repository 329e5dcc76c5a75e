"""Clock offset between the two hosts that traced one TCP connection, NTP-style, with its error bound.

Side A and side B each stamp their records with their own wall clock. A packet that
A sent at ``a`` (A's clock) and B received at ``b`` (B's clock) says
``offset <= b - a``, where ``offset = clock_B - clock_A``: the one-way delay cannot
be negative. A packet B sent at ``b`` and A received at ``a`` says
``offset >= b - a``. The tightest bound of each direction gives an interval; its
middle is the estimate and its half-width the error bound -- NTP's
``((t2 - t1) + (t3 - t4)) / 2`` and ``delta / 2`` for the best pair of each
direction (RFC 5905 §8), except that the two halves need not be one exchange.

Which events are such pairs (causal: the receiver's event can only follow the
sender's), from what nettrail records:
- the handshake: the opener's ESTABLISHED (it got the SYN-ACK, then sends the ACK)
  before the listener's ESTABLISHED (it got that ACK);
- the close: FIN_WAIT_1 (FIN sent next) before the peer's CLOSE_WAIT (FIN received);
  the peer's CLOSE_WAIT (it acknowledges the FIN next) before FIN_WAIT_2 (that ACK
  received); LAST_ACK (FIN sent next) before the peer's TIME_WAIT or CLOSING;
- data and ACKs: a SIFTR "out" sample (net_dev_queue, before the wire) and the
  peer's "in" sample (tcp_rcv_established, after it) of a segment with the same
  sequence and acknowledgment numbers. The earliest of each side is used: whatever
  copy was received, it was sent no earlier than the first copy sent, so the bound
  stays true with retransmissions.
Drift over the connection's life is not modelled (ppm: microseconds per second).
Used by webapp/dashboard/stitched.py; tests/test_stitch_clock.py. docs/dashboard.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class StateChange:
    ts: float  # the side's wall clock, seconds
    state: str  # FreeBSD name (translators.records_fields.TCP_STATES)
    active: bool | None = None  # on ESTABLISHED: this side opened the connection


@dataclass(frozen=True)
class Segment:
    """One SIFTR sample: the segment a side sent ("out") or received ("in")."""

    ts: float
    direction: str  # "in" or "out"
    th_seq: int
    th_ack: int


@dataclass(frozen=True)
class Side:
    states: Sequence[StateChange] = ()
    segments: Sequence[Segment] = ()


@dataclass(frozen=True)
class Pair:
    sent: float  # sender's clock
    received: float  # receiver's clock
    what: str  # "handshake", "close", "segment"


@dataclass(frozen=True)
class Offset:
    """clock_B - clock_A in seconds: subtract it from B's times to put them on A's clock."""

    offset: float
    error: float  # half-width: the true offset is within offset +- error
    lower: float
    upper: float
    pairs_ab: int
    pairs_ba: int
    consistent: bool  # lower <= upper; False: a pair broke causality (e.g. a clock stepped)

    def as_json(self) -> dict[str, object]:
        return {
            "offset_s": self.offset,
            "error_s": self.error,
            "lower_s": self.lower,
            "upper_s": self.upper,
            "pairs": {"a_to_b": self.pairs_ab, "b_to_a": self.pairs_ba},
            "consistent": self.consistent,
        }


def _first(states: Iterable[StateChange], *names: str) -> float | None:
    times = [s.ts for s in states if s.state in names]
    return min(times) if times else None


def _established(side: Side, active: bool) -> float | None:
    times = [s.ts for s in side.states if s.state == "ESTABLISHED" and s.active is active]
    return min(times) if times else None


def state_pairs(x: Side, y: Side) -> list[Pair]:
    """Causal pairs from state changes for packets that went from x to y."""
    pairs: list[Pair] = []
    opened, accepted = _established(x, True), _established(y, False)
    if opened is not None and accepted is not None:
        pairs.append(Pair(opened, accepted, "handshake"))
    rules = (
        (("FIN_WAIT_1",), ("CLOSE_WAIT",)),  # x's FIN
        (("CLOSE_WAIT",), ("FIN_WAIT_2",)),  # x acknowledges y's FIN
        (("LAST_ACK",), ("TIME_WAIT", "CLOSING")),  # x's FIN after y's
    )
    for sent_in, received_in in rules:
        sent, received = _first(x.states, *sent_in), _first(y.states, *received_in)
        if sent is not None and received is not None:
            pairs.append(Pair(sent, received, "close"))
    return pairs


def segment_pairs(x: Side, y: Side) -> list[Pair]:
    """Segments x sent and y received, matched by (seq, ack): the earliest of each side."""
    sent: dict[tuple[int, int], float] = {}
    for seg in x.segments:
        if seg.direction == "out":
            key = (seg.th_seq, seg.th_ack)
            sent[key] = min(seg.ts, sent.get(key, seg.ts))
    received: dict[tuple[int, int], float] = {}
    for seg in y.segments:
        key = (seg.th_seq, seg.th_ack)
        if seg.direction == "in" and key in sent:
            received[key] = min(seg.ts, received.get(key, seg.ts))
    return [Pair(sent[key], ts, "segment") for key, ts in received.items()]


def shared_segments(x: Side, y: Side) -> int:
    """Segments one side sent and the other received: evidence both are one connection
    (the same sequence space, so the same ISNs), not a reused 4-tuple."""
    return len(segment_pairs(x, y)) + len(segment_pairs(y, x))


def estimate(a: Side, b: Side) -> Offset | None:
    """The offset of B's clock from A's, or None without a pair in each direction."""
    ab = state_pairs(a, b) + segment_pairs(a, b)
    ba = state_pairs(b, a) + segment_pairs(b, a)
    return from_pairs(ab, ba)


def from_pairs(ab: Sequence[Pair], ba: Sequence[Pair]) -> Offset | None:
    if not ab or not ba:
        return None
    upper = min(p.received - p.sent for p in ab)  # offset <= b - a
    lower = max(p.sent - p.received for p in ba)  # offset >= b - a (b sent, a received)
    return Offset(
        offset=(upper + lower) / 2,
        error=abs(upper - lower) / 2,
        lower=lower,
        upper=upper,
        pairs_ab=len(ab),
        pairs_ba=len(ba),
        consistent=lower <= upper,
    )

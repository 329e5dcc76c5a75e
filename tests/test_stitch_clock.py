"""The clock offset between the two ends of one connection (webapp/dashboard/stitch_clock.py).

One exchange with known one-way delays, side B's clock shifted by a known offset:
the estimate is the middle of the tightest causal bounds of each direction, and
the true offset lies within its error bound. Times are in A's clock + the delays
written beside them, so every expected number can be checked by hand.
"""

from __future__ import annotations

import pytest

from webapp.dashboard.stitch_clock import Segment, Side, StateChange, estimate, from_pairs, shared_segments

THETA = 3.217  # clock_B - clock_A


def exchange(theta: float) -> tuple[Side, Side]:
    """A opens, sends data, B answers, A closes first. A-clock times; B's plus theta."""
    a = Side(
        states=[
            StateChange(1000.000, "SYN_SENT", True),
            StateChange(1000.010, "ESTABLISHED", True),  # SYN-ACK in; ACK out next: B has it 0.4 ms later
            StateChange(1000.020, "FIN_WAIT_1"),  # FIN out: at B 0.2 ms later
            StateChange(1000.0205, "FIN_WAIT_2"),  # B's ACK of the FIN, sent 0.3 ms earlier
            StateChange(1000.0213, "TIME_WAIT"),  # B's FIN, sent 0.3 ms earlier
        ],
        segments=[
            Segment(1000.011, "out", 1000, 5000),  # at B 0.3 ms later
            Segment(1000.0131, "in", 5000, 2448),  # B sent it 0.5 ms earlier
            Segment(1000.014, "out", 2448, 5100),  # retransmitted below; B has only the copy
            Segment(1000.016, "out", 2448, 5100),
        ],
    )
    b = Side(
        states=[
            StateChange(1000.0104 + theta, "SYN_RECEIVED", False),
            StateChange(1000.0104 + theta, "ESTABLISHED", False),
            StateChange(1000.0202 + theta, "CLOSE_WAIT"),
            StateChange(1000.021 + theta, "LAST_ACK"),
        ],
        segments=[
            Segment(1000.0113 + theta, "in", 1000, 5000),
            Segment(1000.0126 + theta, "out", 5000, 2448),
            Segment(1000.0163 + theta, "in", 2448, 5100),  # the retransmitted copy (sent at 1000.016)
            Segment(1000.0170 + theta, "in", 7777, 5100),  # nothing A sampled: not a pair
        ],
    )
    return a, b


@pytest.mark.parametrize("theta", [THETA, -0.75, 0.0])
def test_a_known_offset_is_recovered_within_the_stated_bound(theta: float) -> None:
    a, b = exchange(theta)
    est = estimate(a, b)
    assert est is not None
    # A->B: handshake 0.4 ms, FIN 0.2 ms, data 0.3 ms, retransmission 2.3 ms after the first copy: upper = theta + 0.2 ms.
    # B->A: data 0.5 ms, FIN's ACK 0.3 ms, B's FIN 0.3 ms: lower = theta - 0.3 ms.
    assert (est.pairs_ab, est.pairs_ba) == (4, 3)
    assert est.upper == pytest.approx(theta + 0.0002, abs=1e-9)
    assert est.lower == pytest.approx(theta - 0.0003, abs=1e-9)
    assert est.offset == pytest.approx(theta - 0.00005, abs=1e-9)
    assert est.error == pytest.approx(0.00025, abs=1e-9)
    assert est.consistent
    assert abs(est.offset - theta) <= est.error


def test_the_estimate_is_symmetric_seen_from_the_other_side() -> None:
    a, b = exchange(THETA)
    forward, backward = estimate(a, b), estimate(b, a)
    assert forward is not None and backward is not None
    assert backward.offset == pytest.approx(-forward.offset, abs=1e-9)
    assert backward.error == pytest.approx(forward.error, abs=1e-9)


def test_without_a_pair_in_each_direction_there_is_no_estimate() -> None:
    a, b = exchange(THETA)
    only_a_sends = Side(states=[s for s in b.states if s.state == "ESTABLISHED"])  # only the handshake's ACK
    assert estimate(Side(states=a.states[:2]), only_a_sends) is None
    assert from_pairs([], []) is None


def test_shared_segments_tell_one_sequence_space_from_a_reused_tuple() -> None:
    a, b = exchange(THETA)
    assert shared_segments(a, b) == 3  # (1000, 5000) and (2448, 5100) from A, (5000, 2448) from B
    other_isns = Side(segments=[Segment(s.ts, s.direction, s.th_seq + 99_999, s.th_ack + 7) for s in b.segments])
    assert shared_segments(a, other_isns) == 0

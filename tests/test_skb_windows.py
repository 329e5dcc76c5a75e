"""The windows' clock of skb-lifecycle --skb-window (collector/bpf/windows.py) on a clock
the test sets: when a window opens, closes and ends, how long it stays open, and that its
end hooks wait for the lifetimes it followed (at most GRACE_S). The kernel side, real
hooks and real buffers, is tests/test_collect_skb_window.py."""

from __future__ import annotations

import pytest

from collector.bpf.windows import GRACE_S, SkbWindows
from translators.skb_window import WindowSpec, parse_window


class Steps:
    """Records what the clock asks a session to do; `followed` is the kernel's live count."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.followed = 0

    def set_skb_window(self, state: str) -> None:
        self.calls.append(state)

    def skb_follow_counts(self) -> tuple[int, int]:
        return self.followed, 0


def test_parse_window_reads_open_and_every_and_says_what_is_wrong() -> None:
    assert parse_window("0.25/5") == WindowSpec(0.25, 5.0)
    assert parse_window("0.2/2").duty == pytest.approx(0.1)
    assert parse_window("0.2/2").arg() == "0.2/2"
    for bad in ("1", "1/1", "0.01/1", "2/1", "1/4000", "x/1", "/"):
        with pytest.raises(ValueError, match="--skb-window"):
            parse_window(bad)


def test_a_window_opens_at_once_closes_after_open_and_the_next_opens_every_later() -> None:
    steps = Steps()
    w = SkbWindows(steps, WindowSpec(0.2, 2.0))
    start = w.next_open
    w.tick(start)
    assert (w.state, steps.calls) == ("open", ["open"])
    w.tick(start + 0.19)
    assert w.state == "open"
    w.tick(start + 0.21)
    assert (w.state, steps.calls[-1], w.windows) == ("ending", "closed", 1)
    w.tick(start + 0.22)  # no lifetime left: the end hooks go at the next tick
    assert (w.state, steps.calls[-1]) == ("closed", "ended")
    w.tick(start + 1.99)
    assert w.state == "closed"
    w.tick(start + 2.0)
    assert (w.state, steps.calls) == ("open", ["open", "closed", "ended", "open"])
    assert w.open_total(start + 2.1) == pytest.approx(0.21 + 0.1)


def test_the_end_hooks_stay_while_followed_lifetimes_remain_at_most_the_grace() -> None:
    steps = Steps()
    w = SkbWindows(steps, WindowSpec(0.2, 2.0))
    start = w.next_open
    w.tick(start)
    w.tick(start + 0.2)
    steps.followed = 3
    w.tick(start + 0.2 + GRACE_S / 2)
    assert w.state == "ending"
    steps.followed = 1
    w.tick(start + 0.2 + GRACE_S)  # still one: the grace is over all the same
    assert (w.state, steps.calls) == ("closed", ["open", "closed", "ended"])


def test_late_ticks_open_the_next_window_at_once_not_a_burst_of_them() -> None:
    steps = Steps()
    w = SkbWindows(steps, WindowSpec(0.2, 2.0))
    start = w.next_open
    w.tick(start)
    w.tick(start + 10.0)  # a poll loop stalled for 10 s: the window closes then
    w.tick(start + 10.0)
    w.tick(start + 10.0)
    assert steps.calls == ["open", "closed", "ended", "open"]
    assert w.next_open == start + 12.0
    w.tick(start + 10.3)
    w.tick(start + 10.4)
    w.tick(start + 11.9)  # every from this window's opening, not back to back
    assert steps.calls == ["open", "closed", "ended", "open", "closed", "ended"]

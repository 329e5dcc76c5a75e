"""skb-lifecycle in windows (--skb-window OPEN/EVERY): its per-buffer hooks attached for
OPEN seconds of every EVERY.

Every hook on a buffer's path costs its dispatch for every packet on the machine, followed
or not (about 1.2% of the CPU per byte of bulk loopback TCP each, docs/benchmarks.md), so
no choice made inside the kernel brings lifecycles under the always-on budget. A window
does: between windows the hooks are not attached and cost nothing. Inside a window the
kernel chooses as before (one buffer in --skb-sample N, counted exactly), so the counts
beside the samples are those of the windows, and the time the windows were open is kept
beside them.

A window opens with its end hooks first (the copy to the reader, the consume), then
`skb_window` opened and the first-sighting hooks; it closes in the reverse: no lifetime
starts once `skb_window` is closed (a first-sighting hook another provider keeps attached
included), and the end hooks stay until every lifetime it followed has ended or GRACE_S
has passed (a lifetime still followed then ends "last seen" at a later sighting).
Keep in sync with kmod/nettrail.h (struct nt_skb_window) and collector/bpf/loader.py
(WINDOW_START / WINDOW_END, KernelSession.set_skb_window).
"""

from __future__ import annotations

import time
from typing import Protocol

from translators.skb_window import WindowSpec

GRACE_S = 0.1  # end hooks kept after a window closes, at most (buffers read later end "last seen")


class WindowedSession(Protocol):
    def set_skb_window(self, state: str) -> None: ...
    def skb_follow_counts(self) -> tuple[int, int]: ...


class SkbWindows:
    """The windows' clock, driven by the source's poll loop (tick)."""

    def __init__(self, session: WindowedSession, spec: WindowSpec) -> None:
        self.session = session
        self.spec = spec
        self.state = "closed"  # -> "open" -> "ending" (end hooks still attached) -> "closed"
        self.next_open = time.monotonic()  # the first window opens at the first tick
        self.opened_at = 0.0
        self.closed_at = 0.0
        self.windows = 0  # windows closed
        self.open_s = 0.0  # the time first-sighting hooks were attached, all windows

    def open_total(self, now: float) -> float:
        """Seconds lifetimes could start, all windows so far (the one open included)."""
        return self.open_s + (now - self.opened_at if self.state == "open" else 0.0)

    def tick(self, now: float) -> None:
        if self.state == "closed" and now >= self.next_open:
            self.session.set_skb_window("open")
            self.state, self.opened_at = "open", now
            # the next one EVERY after this one was due; ticks that came late start the count again
            self.next_open += self.spec.every_s
            if self.next_open <= now:
                self.next_open = now + self.spec.every_s
        elif self.state == "open" and now >= self.opened_at + self.spec.open_s:
            self.session.set_skb_window("closed")
            self.state, self.closed_at = "ending", now
            self.windows += 1
            self.open_s += now - self.opened_at
        elif self.state == "ending" and (now >= self.closed_at + GRACE_S or self.session.skb_follow_counts()[0] == 0):
            self.session.set_skb_window("ended")
            self.state = "closed"

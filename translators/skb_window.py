"""skb-lifecycle's windows (--skb-window OPEN/EVERY): its per-buffer hooks attached for
OPEN seconds of every EVERY. The one definition of the spec and its text form, shared by
the collector (collector/bpf/windows.py runs them), the dashboard's tracing request
(translators/tracing_request.py) and the views that say what windows mean
(webapp/traces/skb_recording.py)."""

from __future__ import annotations

from dataclasses import dataclass

MIN_OPEN_S = 0.05  # shorter windows would be mostly attach and detach
MAX_EVERY_S = 3600.0
ALWAYS = "0"  # the text form of "no windows": the hooks attached all the time


@dataclass(frozen=True)
class WindowSpec:
    open_s: float
    every_s: float

    @property
    def duty(self) -> float:
        """The share of the time a window is open."""
        return self.open_s / self.every_s

    def text(self) -> str:
        return f"windows of {self.open_s:g} s every {self.every_s:g} s"

    def arg(self) -> str:
        return f"{self.open_s:g}/{self.every_s:g}"


def parse_window(text: str) -> WindowSpec:
    """'0.25/5' -> WindowSpec(0.25, 5.0); ValueError says what is wrong."""
    head, sep, tail = text.partition("/")
    try:
        spec = WindowSpec(float(head), float(tail))
    except ValueError:
        raise ValueError(f"--skb-window {text!r}: use OPEN/EVERY in seconds, e.g. 0.25/5") from None
    if not sep or not MIN_OPEN_S <= spec.open_s < spec.every_s <= MAX_EVERY_S:
        raise ValueError(
            f"--skb-window {text!r}: OPEN/EVERY in seconds with {MIN_OPEN_S:g} <= OPEN < EVERY <= {MAX_EVERY_S:g}"
        )
    return spec

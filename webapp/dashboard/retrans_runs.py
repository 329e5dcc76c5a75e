"""A lossy connection's retransmissions as runs, for the detail page's state timeline.

A transfer with 4 % loss leaves hundreds of tcp_retransmit records; one timeline row each
pushed the charts thousands of pixels down (issue 18 item 8). A *run* is a stretch of
retransmissions with no state change or reset between them and no gap longer than
:data:`RUN_GAP_S`; the timeline shows one row per run (count, first and last time, bytes,
kinds). The charts get the individual times (``marks``) and aggregate them per pixel
bucket themselves, so the markers follow the zoom.
Keep in sync with: detail.timeline, js/connection.js (timeline rows, drawMarks).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

RUN_GAP_S = 1.0  # a quieter second ends a run: the next loss episode is a new row
MAX_MARKS = 100_000  # retransmission times handed to the charts (the first ones)


@dataclass
class Run:
    first_ns: int
    first_wall: float
    last_wall: float
    last_ns: int
    count: int = 0
    bytes: int = 0
    kinds: Counter[str] = field(default_factory=Counter)

    def add(self, ts_ns: int, ts_wall: float, payload: int | None, kind: str | None) -> None:
        self.last_ns, self.last_wall = ts_ns, ts_wall
        self.count += 1
        self.bytes += payload or 0
        self.kinds[kind or "retransmission"] += 1

    def item(self) -> dict[str, Any]:
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(self.kinds.items(), key=lambda kv: (-kv[1], kv[0])))
        segments = "segment" if self.count == 1 else "segments"
        return {
            "type": "retransmits",
            "ts": self.first_wall,
            "last": self.last_wall,
            "count": self.count,
            "bytes": self.bytes,
            "kinds": dict(self.kinds),
            "text": f"{self.count} {segments} retransmitted ({kinds}), {self.bytes:,} bytes",
        }


def runs(
    retransmits: list[tuple[int, float, int | None, str | None]], breaks: list[int]
) -> list[tuple[int, dict[str, Any]]]:
    """``(ts_ns, timeline item)`` per run of ``retransmits`` (``(ts_ns, ts_wall, payload,
    kind)`` in time order); ``breaks`` are the ts_ns of state changes and resets, which end
    a run because the timeline shows them between runs."""
    out: list[tuple[int, dict[str, Any]]] = []
    cuts = sorted(breaks)
    cut_i = 0
    run: Run | None = None
    for ts_ns, ts_wall, payload, kind in retransmits:
        crossed = False
        while cut_i < len(cuts) and cuts[cut_i] <= ts_ns:
            crossed = True
            cut_i += 1
        if run is None or crossed or ts_ns - run.last_ns > RUN_GAP_S * 1e9:
            if run is not None:
                out.append((run.first_ns, run.item()))
            run = Run(ts_ns, ts_wall, ts_wall, ts_ns)
        run.add(ts_ns, ts_wall, payload, kind)
    if run is not None:
        out.append((run.first_ns, run.item()))
    return out

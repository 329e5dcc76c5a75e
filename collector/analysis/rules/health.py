"""H1: collector loss is an alert too (anomalies.md 6).

A ``loss_report`` says how many events of one type the collector could not deliver
(ring-buffer reservation failures, malformed input). Any loss is a warning; more than
``critical_share`` of that event type's events in ``window_s`` is critical. The loss
marks every alert of the host whose span touches the window as incomplete; the engine
does that whether or not H1 is enabled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from translators.records import LossReport, Record

from ..state import Window
from .base import Context, Rule, host_subject


@dataclass(slots=True)
class _Loss:
    lost: Window
    received: Window
    received_total: int | None = None
    evidence: list[int] = field(default_factory=list)


class CollectorLoss(Rule):
    rule_id = "H1"
    kinds = ("loss_report",)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.window = self.num("window_s")
        self.types = self.keys_map()

    def feed(self, rec: Record) -> None:
        if not isinstance(rec, LossReport):
            return
        w = self.window
        s = self.types.get_or_create((rec.host_id, rec.event_type), lambda: _Loss(Window(w), Window(w)))
        t = rec.ts_wall
        if rec.received_total is not None:
            if s.received_total is not None and rec.received_total > s.received_total:
                s.received.add(t, rec.received_total - s.received_total)
            s.received_total = rec.received_total
        if rec.lost <= 0:
            return
        s.lost.add(t, rec.lost)
        if len(s.evidence) < 32:
            s.evidence.append(rec.seq)
        lost, received = s.lost.total(t), s.received.total(t)
        share = lost / (lost + received)
        critical = share > self.num("critical_share")
        known = f" ({share:.1%} of them)" if received else ""
        message = (
            f"The collector lost {int(lost)} {rec.event_type} events in {w:g} s{known}, {rec.lost_total} since it "
            f"started: alerts and timelines for this window are built on incomplete data, so absence of an alert "
            f"proves nothing here."
        )
        self.fire(
            "lost-events", ("event", rec.event_type), now=t, severity="critical" if critical else "warning",
            subject=host_subject(rec), message=message, clear_after=2 * w, metric=share, evidence=s.evidence,
        )  # fmt: skip

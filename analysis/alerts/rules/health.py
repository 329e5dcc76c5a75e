"""H1 collector loss and H4 collector overhead are alerts too (anomalies.md 6).

A ``loss_report`` says how many events of one type the collector could not deliver
(ring-buffer reservation failures, malformed input). Any loss is a warning; more than
``critical_share`` of that event type's events in ``window_s`` is critical. The loss
marks every alert of the host whose span touches the window as incomplete; the engine
does that whether or not H1 is enabled.

H4: a ``collector_stats`` record (one per --stats-interval) whose ``agent_cpu_percent``
(the agent's whole cost: its process, its children and its programs' kernel time; the
process's ``cpu_percent`` where a collector could not measure the rest) is above
``max_cpu_percent`` of one CPU is a warning; the sentence names the event type that
dominates and the switch that thins it out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from translators.records import CollectorStats, LossReport, Record

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
        if rec.probe == "skipped":
            self._skipped(rec, s)
            return
        lost, received = s.lost.total(t), s.received.total(t)
        share = lost / (lost + received)
        critical = share > self.num("critical_share")
        known = f" ({share:.1%} of them)" if received else ""
        message = (
            f"The collector lost {int(lost)} {rec.event_type} events in {w:g} s{known}, {rec.lost_total} since it "
            f"started: alerts and timelines for this window are built on incomplete data, so absence of an alert "
            f"proves nothing here."
        )
        if rec.hook == "sink/killed":  # reported by the next collector (collector/sinks/held.py)
            message = (
                f"A collector on this host was killed (SIGKILL) holding {rec.lost} records in memory (unsent, or "
                f"unread in its kernel ring), lost: alerts "
                f"and timelines of its last moments are built on incomplete data, so absence of an alert proves "
                f"nothing there."
            )
        self.fire(
            "lost-events", ("event", rec.event_type), now=t, severity="critical" if critical else "warning",
            subject=host_subject(rec), message=message, clear_after=2 * w, metric=share, evidence=s.evidence,
        )  # fmt: skip

    def _skipped(self, rec: LossReport, s: _Loss) -> None:
        """Program runs the kernel skipped: no count of all runs to weigh them against, so a warning."""
        t, w = rec.ts_wall, self.window
        skipped, program = int(s.lost.total(t)), (rec.hook or "").removeprefix("prog/")
        message = (
            f"The kernel skipped {skipped} runs of nettrail's {program} program in {w:g} s, {rec.lost_total} since "
            f"the collector started (an interrupt hit its tracepoint while it ran on that CPU): their events and "
            f"exact counts are missing, so alerts for this window are built on incomplete data."
        )
        self.fire(
            "skipped-runs", ("event", rec.event_type), now=t, severity="warning", subject=host_subject(rec),
            message=message, clear_after=2 * w, metric=float(skipped), evidence=s.evidence,
        )  # fmt: skip


# The event type that costs the most, and how to have fewer of them (docs/collector.md).
_TIGHTEN = {
    "siftr_sample": "raise --ppl (one SIFTR sample per N packets)",
    "tcpdebug_snapshot": "drop the tcpdebug provider, or filter it to the connections you debug",
    "ip_packet": "use ip-flows (exact counters) with --ip-sample N instead of the ip provider",
    "skb_stage": "use the skb provider (drops only) instead of skb-lifecycle",
    "skb_drop": "cap drop events with --drop-rate N (the drop counts stay exact)",
    "udp_datagram": "filter the udp provider to the ports you watch",
}
_FILTERS = "--filter port=, addr=, pid=, cgroup= or netns= (decided in the kernel), or fewer --providers"


class CollectorOverhead(Rule):
    rule_id = "H4"
    kinds = ("collector_stats",)

    def feed(self, rec: Record) -> None:
        if not isinstance(rec, CollectorStats):
            return
        used = rec.cpu_percent if rec.agent_cpu_percent is None else rec.agent_cpu_percent
        if used <= self.num("max_cpu_percent"):
            return
        top = max(rec.events_by_type.items(), key=lambda kv: kv[1], default=None)
        busiest = f", mostly {top[0]} ({top[1] / rec.interval_s:,.0f}/s)" if top and top[1] else ""
        advice = _TIGHTEN.get(top[0], "") if top else ""
        message = (
            f"The collector (pid {rec.pid}) used {used:.1f}% of one CPU over {rec.interval_s:.1f} s{_parts(rec)}, above "
            f"the {self.num('max_cpu_percent'):g}% budget, at {rec.events_per_s:,.0f} events/s{busiest}: tracing "
            f"itself is now a load on this host. Tighten it: {advice + '; or ' if advice else ''}{_FILTERS}."
        )
        self.fire(
            "cpu", ("collector", rec.pid), now=rec.ts_wall, severity="warning", subject=host_subject(rec),
            message=message, clear_after=2 * max(rec.interval_s, self.num("window_s")), metric=used,
            evidence=(rec.seq,),
        )  # fmt: skip


def _parts(rec: CollectorStats) -> str:
    """Where the whole cost went, when it is known: the process, its children, its programs."""
    if rec.agent_cpu_percent is None or rec.programs_run_time_ns is None:
        return ""
    wall = rec.interval_s / 100.0
    children = (rec.children_cpu_time_s or 0.0) / wall
    kids = f", its children {children:.1f}%" if children >= 0.05 else ""
    programs = rec.programs_run_time_ns / 1e9 / wall
    return f" (its process {rec.cpu_percent:.1f}%{kids}, its eBPF programs in the kernel {programs:.1f}%)"

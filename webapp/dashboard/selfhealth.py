"""The status page's data: each collector's tracer self-health (anomalies.md 6).

Per host: the newest ``collector_status`` (H3: tracepoints attached with their program
ids, absent or failed ones, rules unavailable or degraded and why, sampling settings),
the ``collector_stats`` series (H4: the process's CPU % of one CPU and the agent's whole
cost beside it -- its children's CPU and its programs' kernel time --, events/s, RSS)
with the CPU budget of rule H4, the newest ``sampling_report`` per event type (H2), ring-buffer losses by
event type (H1) and the newest version of each self-health alert (H1, H4).
Also a connection's SIFTR sampling windows for the detail page. Keep in sync with
js/status.js, js/connection.js, api.py (status), translators/records.py
(CollectorStatus, CollectorStats, SamplingReport).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Sum

from analysis.alerts.config import load_config
from webapp.dashboard import alert_versions
from webapp.dashboard.tables import (
    Alert,
    CollectorStats,
    CollectorStatus,
    FlowCounters,
    LossReport,
    SamplingReport,
    SiftrSample,
)
from webapp.traces import skb_recording

MAX_STATS = 2000  # newest collector_stats per host in the chart (5.5 h at the default 10 s)
MAX_ALERTS = 50
MAX_WINDOWS = 500  # newest flow_counters windows of a connection
SELF_HEALTH_RULES = ("H1", "H2", "H3", "H4")
STATUS_FIELDS = (
    "ts_wall", "pid", "comm", "boot_id", "providers", "attached", "absent", "failed", "missing_drop_reasons",
    "rules_unavailable", "rules_degraded", "kernel_release", "ppl", "ip_sample", "drop_rate", "skb_sample", "skb_stages",
    "skb_window", "stack_counters", "providers_from", "untraced_ns",
)  # fmt: skip


def cpu_budget() -> float:
    """Rule H4's threshold in force for the webapp ($NETTRAIL_RULES, else the default 5 %)."""
    try:
        return float(load_config().params("H4")["max_cpu_percent"])
    except (ValueError, KeyError):  # an unusable rules file: the collector says so where it runs
        return float(load_config(env={}).params("H4")["max_cpu_percent"])


# Rules outside the rules file: the capture rules (analysis/alerts/pcap_rules.py, no
# thresholds to configure) and the self-health ones the collector raises itself.
RULES_OUTSIDE_CONFIG = ("P1", "P2", "P3", "P4", "P5", "P6", "P7", *SELF_HEALTH_RULES)


def known_rules() -> set[str]:
    """Every rule id an alert can carry: the filter's ``anomaly RULE`` refuses others."""
    rules = set(load_config(env={}).rule_ids()) | set(RULES_OUTSIDE_CONFIG)
    return rules | set(Alert.objects.values_list("rule_id", flat=True).distinct())


def newest_status(host: str, *fields: str) -> dict[str, Any] | None:
    """These fields of the host's newest ``collector_status``; None when it sent none."""
    row: dict[str, Any] | None = (
        CollectorStatus.objects.filter(host_id=host).order_by("-ts_wall", "-id").values(*fields).first()
    )
    return row


def provider_off(provider: str | tuple[str, ...], host: str | None = None) -> list[dict[str, Any]]:
    """Hosts whose newest ``collector_status`` lists none of ``provider`` (one name, or
    any of several: a provider and its always-on mode), with the providers they run: an
    empty panel says why it is empty (issue 18 item 3)."""
    wanted = {provider} if isinstance(provider, str) else set(provider)
    hosts = [host] if host else hosts_with_status()
    out = []
    for h in hosts:
        row = newest_status(h, "providers")
        if row is not None and not wanted & set(row["providers"] or []):
            out.append({"host_id": h, "providers": list(row["providers"] or [])})
    return out


def provider_degraded(providers: tuple[str, ...], host: str | None = None) -> list[dict[str, Any]]:
    """[{host_id, provider, what, why}]: what the hosts' newest ``collector_status`` says
    these providers cannot give on that kernel or host (its ``degraded``), for the pages
    whose records lack it (e.g. the UDP page's destinations without the cgroup programs)."""
    out = []
    for h in [host] if host else hosts_with_status():
        row = newest_status(h, "providers", "degraded")
        if row is None:
            continue
        for provider in providers:
            if provider in (row["providers"] or []):
                for what, why in sorted((row["degraded"] or {}).get(provider, {}).items()):
                    out.append({"host_id": h, "provider": provider, "what": what, "why": why})
    return out


def lifecycle_sampling(host: str | None = None) -> list[dict[str, Any]]:
    """Per host running skb-lifecycle: one buffer in how many its collector follows
    (``collector_status.skb_sample``) and the newest exact counts beside it (the
    ``sampling_report`` of skb_event: buffers seen and followed in that window), and the
    stages it records (``skb_stages``, with the note the views show when some are not
    recorded: webapp/traces/skb_recording.py), for the note every lifecycle view carries
    (issue 18 item 9)."""
    out = []
    for h in [host] if host else hosts_with_status():
        rec = skb_recording.recording(h)
        if rec is None:
            continue
        cols = ("observed", "emitted", "window_s", "open_s", "ts_wall")
        report = SamplingReport.objects.filter(host_id=h, event_type="skb_event").order_by("-ts_wall", "-id")
        out.append({"host_id": h, **rec, "last": report.values(*cols).first()})
    return out


# collector_stats' measure of the agent's whole cost beside its process's CPU (H4)
AGENT_COST_FIELDS = (
    "children_cpu_time_s", "children_cpu_total_s", "programs_run_time_ns", "programs_run_count",
    "programs_run_time_total_ns", "agent_cpu_percent",
)  # fmt: skip


def agent_cost(row: dict[str, Any]) -> dict[str, float | None]:
    """The interval's programs' kernel time and children's CPU in percent of one CPU, as
    cpu_percent is (null where the collector did not measure them)."""
    wall = row["interval_s"] / 100.0 if row["interval_s"] else None
    ns, children = row["programs_run_time_ns"], row["children_cpu_time_s"]
    return {
        "programs_percent": None if ns is None or not wall else round(ns / 1e9 / wall, 3),
        "children_percent": None if children is None or not wall else round(children / wall, 3),
    }


def hosts_with_status() -> list[str]:
    seen = set(CollectorStatus.objects.values_list("host_id", flat=True).distinct())
    seen |= set(CollectorStats.objects.values_list("host_id", flat=True).distinct())
    return sorted(seen)


def host_status(host: str) -> dict[str, Any]:
    status = newest_status(host, *STATUS_FIELDS)
    cols = (
        "ts_wall", "cpu_percent", "events_per_s", "rss_bytes", "pid", "interval_s", "events_by_type", "cpu_total_s",
        "stopped", "poll_interval_s", "poll_missed", "counters_missed", *AGENT_COST_FIELDS,
    )  # fmt: skip
    rows = list(CollectorStats.objects.filter(host_id=host).order_by("-ts_wall", "-id").values(*cols)[:MAX_STATS])
    rows.reverse()
    for r in rows:
        r.update(agent_cost(r))
    series: dict[str, list[Any]] = {
        "t": [], "cpu_percent": [], "agent_cpu_percent": [], "programs_percent": [], "children_percent": [],
        "events_per_s": [], "rss_bytes": [],
    }  # fmt: skip
    for r in rows:
        for k in series:
            series[k].append(r["ts_wall"] if k == "t" else r[k])
    sampling: dict[str, dict[str, Any]] = {}
    sampling_cols = ("event_type", "setting", "window_s", "observed", "emitted", "ratio", "ts_wall")
    for r in SamplingReport.objects.filter(host_id=host).order_by("-ts_wall", "-id").values(*sampling_cols)[:100]:
        sampling.setdefault(r["event_type"], r)
    losses = list(
        LossReport.objects.filter(host_id=host).values("event_type").annotate(lost=Sum("lost")).order_by("-lost")
    )
    alert_cols = ("id", "start", "end", "severity", "rule_id", "status", "count", "message", "metric")
    health = Alert.objects.filter(host_id=host, rule_id__in=SELF_HEALTH_RULES)
    alerts = list(alert_versions.latest(health).order_by("-start", "-id").values(*alert_cols)[:MAX_ALERTS])
    return {
        "host_id": host,
        "status": status,
        "stats": series,
        "latest": rows[-1] if rows else None,
        "sampling": sorted(sampling.values(), key=lambda r: str(r["event_type"])),
        "losses": losses,
        "alerts": alerts,
    }


def status(host: str | None) -> dict[str, Any]:
    hosts = [host] if host else hosts_with_status()
    return {"hosts": [host_status(h) for h in hosts], "cpu_budget": cpu_budget()}


def _session_starts(host: str, after: float | None, until: float) -> list[float]:
    """When the host's collector sessions began (each sends a collector_status first)."""
    qs = CollectorStatus.objects.filter(host_id=host, ts_wall__lte=until)
    if after is not None:
        qs = qs.filter(ts_wall__gt=after)
    return list(qs.order_by("-ts_wall").values_list("ts_wall", flat=True)[:MAX_WINDOWS])


def connection_sampling(host: str, uuid: str) -> dict[str, Any]:
    """SIFTR sampling of one connection per flow_counters window: Δbuffers / Δsamples (H2).
    The buffers siftr saw (``skbs``), of which the kernel sampled one in ppl; records from
    before ``skbs`` existed (0) counted packets per buffer, so their packets stand in."""
    cols = ("ts_wall", "packets_in", "packets_out", "samples", "skbs")
    rows = list(
        FlowCounters.objects.filter(host_id=host, conn_uuid=uuid, proto="tcp")
        .order_by("-ts_ns", "-id")
        .values_list(*cols)[: MAX_WINDOWS + 1]
    )
    rows.reverse()
    windows: list[dict[str, Any]] = []
    prev, prev_t = (0, 0), None
    if len(rows) > MAX_WINDOWS:  # older reports exist: the oldest row read is only a baseline
        prev, prev_t = (rows[0][4] or rows[0][1] + rows[0][2], rows[0][3]), rows[0][0]
        rows = rows[1:]
    starts = _session_starts(host, prev_t, rows[-1][0]) if rows else []
    for t, pin, pout, samples, skbs in rows:
        packets = skbs or pin + pout
        if prev_t is not None and any(prev_t < s <= t for s in starts):
            # a new collector session (a restart, or a swap of its programs) began in this
            # window: its counts start from zero, so they are this window's, not a difference
            prev = (0, 0)
        prev_t = t
        dp, ds = packets - prev[0], samples - prev[1]
        if dp > 0 or ds > 0:
            windows.append({"t": t, "packets": dp, "samples": ds, "ratio": round(dp / ds, 2) if ds > 0 else None})
        prev = (packets, samples)
    if not rows:
        return {"packets": None, "samples": None, "ratio": None, "windows": [], "polled": False}
    _, pin, pout, samples, skbs = rows[-1]
    total = skbs or pin + pout
    return {
        "packets": total,
        "samples": samples,
        "ratio": round(total / samples, 2) if samples else None,
        "windows": windows[-MAX_WINDOWS:],
        # siftr-poll's samples (one per poll that found the socket moved): packets per sample then
        "polled": SiftrSample.objects.filter(host_id=host, conn_uuid=uuid, direction="poll").exists(),
    }

"""The agent's own cost on /metrics: each host's collector CPU and its programs' kernel time.

Read at scrape time from the host's newest ``collector_stats`` (one per --stats-interval,
10 s by default), as counters a process exposes about itself (process_cpu_seconds_total):
they go back to zero when the collector restarts, and the programs' time when a swap of
programs loads new ones; Prometheus' rate() takes such resets in its stride. A host whose
collector could not measure its programs (the kernel refused run-time statistics, or a
collector from before they were measured) has no programs sample: unknown, not 0.
Keep in sync with: translators.records.CollectorStats, docs/reports.md ("Metrics").
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

# metric -> (help, collector_stats field, scale to seconds)
COUNTERS: dict[str, tuple[str, str, float]] = {
    "nettrail_collector_cpu_seconds": (
        "CPU time (user + system, every thread) of the host's collector process since it started",
        "cpu_total_s",
        1.0,
    ),
    "nettrail_collector_children_cpu_seconds": (
        "CPU time of the collector's child processes (the ring keeper) since it started",
        "children_cpu_total_s",
        1.0,
    ),
    "nettrail_collector_programs_seconds": (
        "Kernel time spent in the collector's own eBPF programs since they were loaded (bpf_prog_info run_time_ns)",
        "programs_run_time_total_ns",
        1e-9,
    ),
}


class AgentCost(Collector):
    """One sample per host and counter from the host's newest collector_stats (only
    `host`'s when given)."""

    def __init__(self, host: str | None = None) -> None:
        self.host = host

    def collect(self) -> Iterator[Metric]:
        from webapp.traces.models import KIND_MODELS

        stats = KIND_MODELS["collector_stats"].objects
        hosts = [self.host] if self.host is not None else sorted(set(stats.values_list("host_id", flat=True)))
        families = {name: CounterMetricFamily(name, text, labels=["host"]) for name, (text, _, _) in COUNTERS.items()}
        fields = [field for _, field, _ in COUNTERS.values()]
        for host in hosts:
            newest = stats.filter(host_id=host).order_by("-ts_wall", "-id").values(*fields).first()
            if newest is None:
                continue
            for name, (_, field, scale) in COUNTERS.items():
                if newest[field] is not None:
                    families[name].add_metric([host], newest[field] * scale)
        yield from families.values()

    def describe(self) -> Iterator[Metric]:
        return iter(())  # collected only at scrape time: never touch the DB on registration

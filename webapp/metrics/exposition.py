"""The /metrics registry: DB-backed counters (a custom Collector) and the ingest latency histogram.

Counters are read from IngestCounter at scrape time, one query, and exposed per
METRICS entry with labels host (+ the metric's own label). The latency histogram
lives in process memory (per worker, as Prometheus histograms normally are).
The collector's own cost per host comes from its newest collector_stats (agent_cost.py).
Keep in sync with: webapp/metrics/counting.py (METRICS), docs/reports.md ("Metrics").
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from webapp.metrics.agent_cost import AgentCost
from webapp.metrics.counting import METRICS

# Ingest requests take ~1 ms (tiny batch) to seconds (16 MiB batch on a busy disk).
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

REGISTRY = CollectorRegistry(auto_describe=True)
INGEST_LATENCY = Histogram(
    "nettrail_ingest_request_duration_seconds",
    "Time to handle POST /api/ingest, by outcome (stored or rejected)",
    ["outcome"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)


class DatabaseCounters(Collector):
    """Exposes every IngestCounter row (only `host`'s when given); metrics without rows
    still appear (no samples)."""

    def __init__(self, host: str | None = None) -> None:
        self.host = host

    def collect(self) -> Iterator[Metric]:
        from webapp.metrics.models import IngestCounter
        from webapp.traces.models import Host

        families: dict[str, CounterMetricFamily] = {}
        for key, (label, help_text) in METRICS.items():
            labels = ["host", label] if label else ["host"]
            families[key] = CounterMetricFamily(f"nettrail_{key}", help_text, labels=labels)
        counters = IngestCounter.objects.all() if self.host is None else IngestCounter.objects.filter(host=self.host)
        rows = counters.order_by("metric", "host", "label").values_list("host", "metric", "label", "value")
        for host, metric, label, value in rows:
            family = families.get(metric)
            if family is not None:
                family.add_metric([host, label] if METRICS[metric][0] else [host], value)
        yield from families.values()
        if self.host is None:  # a host's token learns nothing about the others, not even how many
            hosts = GaugeMetricFamily("nettrail_hosts", "Hosts known to this server (collectors and imported captures)")
            hosts.add_metric([], Host.objects.count())
            yield hosts

    def describe(self) -> Iterator[Metric]:
        return iter(())  # collected only at scrape time: never touch the DB on registration


REGISTRY.register(DatabaseCounters())
REGISTRY.register(AgentCost())


def host_registry(host: str) -> CollectorRegistry:
    """What a host's ingest token may scrape: that host's counters only (no other host's
    counters, no server-wide latency histogram)."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(DatabaseCounters(host))
    registry.register(AgentCost(host))
    return registry


# Scale-out (REDIS_URL): the ingest stream's length, pending, lag and per-writer throughput.
from webapp.bus.health import BusCollector  # noqa: E402

REGISTRY.register(BusCollector())

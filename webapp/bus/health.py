"""The ingest bus's health for the Status page (``/api/dash/status``'s ``bus``) and ``/metrics``.

Stream length, pending (delivered, not acknowledged), lag (never delivered), Redis
durability (and ``durable``: whether the ingest tier accepts batches under it), and
per writer its records, batches, duplicates, records/s and pending entries
(webapp/bus/streams.py ``status``). Nothing when REDIS_URL is not set (the
appliance); ``{"error": ...}`` / no samples when Redis does not answer.
Keep in sync with: webapp/dashboard/static/dashboard/js/status.js, docs/scale-out.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from redis.exceptions import RedisError

from webapp.bus import streams


def as_json() -> dict[str, Any] | None:
    if not streams.enabled():
        return None
    try:
        return dataclasses.asdict(streams.status())
    except RedisError as exc:
        return {"error": f"Redis unavailable: {exc}"}


class BusCollector(Collector):
    """``nettrail_bus_*``: read from Redis at scrape time."""

    def collect(self) -> Iterator[Metric]:
        if not streams.enabled():
            return
        try:
            state = streams.status()
        except RedisError:
            return
        for name, value, help_text in (
            ("length", state.length, "Entries in the ingest stream (accepted, not yet stored and acknowledged)"),
            ("pending", state.pending, "Entries delivered to a writer and not yet acknowledged"),
            ("lag", state.lag, "Entries never delivered to a writer yet"),
        ):
            gauge = GaugeMetricFamily(f"nettrail_bus_{name}", help_text)
            if value is not None:
                gauge.add_metric([], value)
            yield gauge
        durable = GaugeMetricFamily(
            "nettrail_bus_durable",
            "1 when Redis fsyncs before answering (appendfsync always); 0: the ingest tier refuses every batch",
        )
        durable.add_metric([], 1 if state.durable else 0)
        yield durable
        records = CounterMetricFamily("nettrail_bus_writer_records", "Records stored by the writer", labels=["writer"])
        duplicates = CounterMetricFamily(
            "nettrail_bus_writer_duplicates", "Records a writer found already stored (redeliveries)", labels=["writer"]
        )
        rate = GaugeMetricFamily("nettrail_bus_writer_records_per_second", "Writer throughput", labels=["writer"])
        pending = GaugeMetricFamily("nettrail_bus_writer_pending", "Entries held by the writer", labels=["writer"])
        for writer in state.writers:
            records.add_metric([writer.name], writer.records)
            duplicates.add_metric([writer.name], writer.duplicates)
            rate.add_metric([writer.name], writer.rate)
            pending.add_metric([writer.name], writer.pending)
        yield from (records, duplicates, rate, pending)

    def describe(self) -> Iterator[Metric]:
        return iter(())  # collected only at scrape time

"""Monotonic per-host counters, incremented inside the ingest transaction.

Kept in the database (not in process memory) so every ASGI worker and `analyze
--store` add to the same numbers, they survive restarts, and retention trimming of
record rows never makes a counter go down. One row per (host, metric, label value).
Keep in sync with: webapp/metrics/counting.py (what increments), exposition.py.
"""

from __future__ import annotations

from django.db import models


class IngestCounter(models.Model):
    host = models.TextField()
    metric = models.TextField()  # a key of counting.METRICS
    label = models.TextField(default="")  # value of the metric's extra label ("" when it has none)
    value = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            # The upsert's conflict target; also serves the scrape's full read in key order.
            models.UniqueConstraint(fields=["host", "metric", "label"], name="nt_counter_key"),
        ]

    def __str__(self) -> str:
        return f"{self.metric}{{host={self.host},{self.label}}} = {self.value}"

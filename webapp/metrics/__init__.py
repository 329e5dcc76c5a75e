"""Prometheus /metrics: per-host ingest counters kept in the database, ingest latency."""

"""The ingest bus: HTTP ingest -> Redis stream -> writer processes (docs/scale-out.md)."""

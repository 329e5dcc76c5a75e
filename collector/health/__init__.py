"""Tracer self-health (anomalies.md 6): the collector's records about itself.

coverage.py (H3: what is attached, which rules cannot fire), sampling.py (H2: how
sampled each event type was per window), overhead.py (H4: the collector's CPU and
event rate). H1 (loss) lives in collector/bpf/source.py. Keep in sync with
docs/collector.md ("Tracer self-health").
"""

from __future__ import annotations


def process_comm() -> str | None:
    """This process's command name (/proc/self/comm), for the envelope of its own records."""
    try:
        with open("/proc/self/comm") as f:
            return f.read().strip()
    except OSError:
        return None

"""Time buckets for the dashboard's charts over time: (time, series name, amount) rows
summed into at most BUCKETS equal buckets, the largest series kept by name and the rest
summed as "other". Used by buffers.py (drop reasons, one per drop event) and counters.py
(stack counter deltas). Keep in sync with the charts that read {t, bucket_s, series} in
js/buffers.js and js/counters.js.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

BUCKETS = 60
MIN_SPAN_S = 60.0  # a chart covers at least a minute, so a lone point still gets a readable axis


def bucketed(rows: Sequence[tuple[float, str, int]], top: int, label: str) -> dict[str, Any]:
    """{t: bucket starts, bucket_s, series: [{label: name, counts: [...]}]}, series largest first."""
    if not rows:
        return {"t": [], "series": []}
    t1 = max(r[0] for r in rows)
    t0 = min(min(r[0] for r in rows), t1 - MIN_SPAN_S)
    width = max((t1 - t0) / BUCKETS, 1.0)
    nbuckets = min(BUCKETS, int(math.floor((t1 - t0) / width)) + 1)
    totals: dict[str, int] = {}
    for _t, name, amount in rows:
        totals[name] = totals.get(name, 0) + amount
    kept = [n for n, _total in sorted(totals.items(), key=lambda x: -x[1])[:top]]
    names = kept + (["other"] if len(totals) > len(kept) else [])
    counts = {name: [0] * nbuckets for name in names}
    for t, name, amount in rows:
        i = min(int((t - t0) / width), nbuckets - 1)
        counts[name if name in counts else "other"][i] += amount
    return {
        "t": [t0 + i * width for i in range(nbuckets)],
        "bucket_s": width,
        "series": [{label: n, "counts": counts[n]} for n in names],
    }

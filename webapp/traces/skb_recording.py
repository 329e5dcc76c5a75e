"""What a host's collector records of each buffer lifecycle (skb-lifecycle): one buffer in
how many it follows (``collector_status.skb_sample``), which stages (``skb_stages``) and
when (``skb_window``: only in windows of OPEN seconds every EVERY).

With ``--skb-stages ends`` (the default when sampled, as `nettrail up` runs) a followed
buffer's receive entry hooks and transmit start/done are not attached: its lifecycle is
its first sighting, its copy to its reader and its end, and a stage's "since previous"
spans the stages not recorded. Every lifecycle view and the read API say so
(``stages_note``) rather than show fewer stages as if they were all. Keep in sync with
collector/bpf/loader.py (SKB_STAGE_PROGRAMS), translators/records_health.py
(CollectorStatus.skb_stages, skb_window), collector/bpf/windows.py, js/buffers.js,
js/connection.js.
"""

from __future__ import annotations

from typing import Any

from translators.skb_window import parse_window
from webapp.traces.models import KIND_MODELS

CollectorStatus: Any = KIND_MODELS["collector_status"]

ENDS_NOTE = (
    "Transmit stages (xmit-start, xmit) and receive entry stages before GRO are not recorded: "
    "each followed buffer shows its first sighting, its copy to its reader and its end only, and a "
    "stage's time since the previous one spans the stages not seen. Enable them with --skb-stages all "
    "(nettrail up: NETTRAIL_SKB_STAGES=all)."
)


def window_note(window: str | None) -> str | None:
    """What --skb-window OPEN/EVERY means for the lifecycles shown (None: always on)."""
    if not window:
        return None
    try:
        spec = parse_window(window)
    except ValueError:
        return f"Followed in windows only (--skb-window {window})."
    return (
        f"Followed in windows only: the per-buffer hooks are attached {spec.open_s:g} s of every {spec.every_s:g} s "
        f"({spec.duty:.0%} of the time), so the lifecycles and the counts beside them are those of the windows "
        "(--skb-window; nettrail up: NETTRAIL_SKB_WINDOW=0 follows buffers all the time, at a higher cost)."
    )


def recording(host: str) -> dict[str, Any] | None:
    """The host's newest collector_status, if it runs skb-lifecycle: {skb_sample,
    skb_stages, stages_note, skb_window, window_note}. A status without skb_stages is from
    a collector before the option, which recorded every stage."""
    row = (
        CollectorStatus.objects.filter(host_id=host)
        .order_by("-ts_wall", "-id")
        .values("providers", "skb_sample", "skb_stages", "skb_window")
        .first()
    )
    if row is None or "skb-lifecycle" not in (row["providers"] or []):
        return None
    stages = row["skb_stages"] or "all"
    return {
        "skb_sample": row["skb_sample"] or 1,
        "skb_stages": stages,
        "stages_note": ENDS_NOTE if stages == "ends" else None,
        "skb_window": row["skb_window"],
        "window_note": window_note(row["skb_window"]),
    }

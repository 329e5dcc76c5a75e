"""What the dashboard asks one host's collector to trace: the ``tracing`` member of the
ingest answer (docs/api.md), shared by the webapp that sends it and the collector that
follows it (``nettrail collect --providers-from-server``).

``"tracing": null`` means "your own choice" (the collector's command line);
``{"providers": [...], "skb_sample": N | null}`` names the whole provider set, and N the
buffers skb-lifecycle follows (one in N; null: the collector's own --skb-sample).
The collector's provider names are defined here once (collector/bpf/loader.py
maps each to its kernel bit and programs).
"""

from __future__ import annotations

from typing import Any

import msgspec

PROVIDER_NAMES = ("tcp", "siftr", "tcpdebug", "ip", "udp", "skb", "skb-lifecycle", "ip-flows", "udp-calls")
MAX_SKB_SAMPLE = 1 << 20  # one buffer in a million: beyond that a sample says nothing


class TracingRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    providers: tuple[str, ...]
    skb_sample: int | None = None


def check(request: TracingRequest) -> TracingRequest:
    """The request itself, or ValueError saying what is wrong with it."""
    unknown = [p for p in request.providers if p not in PROVIDER_NAMES]
    if unknown or not request.providers:
        raise ValueError(
            f"providers: unknown {', '.join(unknown) or '(none)'}; choose from {', '.join(PROVIDER_NAMES)}"
        )
    if len(set(request.providers)) != len(request.providers):
        raise ValueError("providers: each provider once")
    if request.skb_sample is not None and not 1 <= request.skb_sample <= MAX_SKB_SAMPLE:
        raise ValueError(f"skb_sample: between 1 (every buffer) and {MAX_SKB_SAMPLE}")
    return request


def from_answer(value: Any) -> TracingRequest | None:
    """The ``tracing`` member of an ingest answer -> a checked request (None: the collector's
    own choice); ValueError when it is not one."""
    if value is None:
        return None
    try:
        request = msgspec.convert(value, TracingRequest)
    except msgspec.ValidationError as exc:
        raise ValueError(f"tracing: {exc}") from None
    return check(request)


def to_answer(request: TracingRequest | None) -> dict[str, Any] | None:
    return None if request is None else {"providers": list(request.providers), "skb_sample": request.skb_sample}

"""What the dashboard asks one host's collector to trace: the ``tracing`` member of the
ingest answer (docs/api.md), shared by the webapp that sends it and the collector that
follows it (``nettrail collect --providers-from-server``).

``"tracing": null`` means "your own choice" (the collector's command line);
``{"providers": [...], "skb_sample": N | null, "skb_window": W}`` names the whole provider
set, N the buffers skb-lifecycle follows (one in N; null: the collector's own
--skb-sample) and W when (``"OPEN/EVERY"``: in windows, ``"0"``: all the time; null or
absent: the collector's own --skb-window).
The collector's provider names are defined here once (collector/bpf/loader.py
maps each to its kernel bit and programs).
"""

from __future__ import annotations

from typing import Any

import msgspec

from translators.skb_window import ALWAYS, parse_window

PROVIDER_NAMES = (
    "tcp", "siftr", "tcpdebug", "ip", "udp", "skb", "skb-lifecycle", "ip-flows", "udp-calls", "siftr-poll",
)  # fmt: skip
MAX_SKB_SAMPLE = 1 << 20  # one buffer in a million: beyond that a sample says nothing


class TracingRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    providers: tuple[str, ...]
    skb_sample: int | None = None
    skb_window: str | None = None


def check(request: TracingRequest) -> TracingRequest:
    """The request (its windows in their short form), or ValueError saying what is wrong with it."""
    unknown = [p for p in request.providers if p not in PROVIDER_NAMES]
    if unknown or not request.providers:
        raise ValueError(
            f"providers: unknown {', '.join(unknown) or '(none)'}; choose from {', '.join(PROVIDER_NAMES)}"
        )
    if len(set(request.providers)) != len(request.providers):
        raise ValueError("providers: each provider once")
    if request.skb_sample is not None and not 1 <= request.skb_sample <= MAX_SKB_SAMPLE:
        raise ValueError(f"skb_sample: between 1 (every buffer) and {MAX_SKB_SAMPLE}")
    if request.skb_window is not None:
        return msgspec.structs.replace(request, skb_window=short_window(request.skb_window))
    return request


def short_window(text: str) -> str:
    """A request's skb_window in its short form ("0.20/2.0" -> "0.2/2"; "0": all the time),
    or ValueError saying what is wrong."""
    if text == ALWAYS:
        return text
    try:
        return parse_window(text).arg()
    except ValueError as exc:
        raise ValueError(f"skb_window: {ALWAYS} (all the time) or {exc}") from None


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
    """The answer's ``tracing`` member; skb_window only when named (a collector from before
    it refuses a member it does not know)."""
    if request is None:
        return None
    out: dict[str, Any] = {"providers": list(request.providers), "skb_sample": request.skb_sample}
    if request.skb_window is not None:
        out["skb_window"] = request.skb_window
    return out

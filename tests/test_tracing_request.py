"""The dashboard's tracing request on the wire (translators/tracing_request.py) and the
options the collector makes of it (collector/bpf/swap.py, options_for)."""

from __future__ import annotations

from typing import Any

import pytest

from collector.bpf.loader import Options
from collector.bpf.swap import COMMAND_LINE, DASHBOARD, options_for
from translators.skb_window import WindowSpec
from translators.tracing_request import TracingRequest, from_answer, to_answer


def test_null_is_the_collectors_own_choice_and_a_request_round_trips() -> None:
    assert from_answer(None) is None
    request = TracingRequest(("tcp", "skb-lifecycle"), 256)
    assert from_answer(to_answer(request)) == request
    assert from_answer({"providers": ["udp"]}) == TracingRequest(("udp",), None)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ({"providers": []}, "providers: unknown (none)"),
        ({"providers": ["tcp", "everything"]}, "providers: unknown everything"),
        ({"providers": ["tcp", "tcp"]}, "each provider once"),
        ({"providers": ["tcp"], "skb_sample": 0}, "skb_sample: between 1"),
        ({"providers": ["tcp"], "skb_sample": 1 << 21}, "skb_sample: between 1"),
        ({"providers": ["tcp"], "skb_window": "1/0.5"}, "skb_window: 0 (all the time) or --skb-window '1/0.5'"),
        ({"providers": ["tcp"], "skb_window": "-1/5"}, "OPEN/EVERY in seconds with 0.05 <= OPEN"),
        ({"providers": ["tcp"], "skb_window": 2}, "tracing: Expected `str | null`"),
        ({"providers": "tcp"}, "tracing: Expected `array`"),
        ({"providers": ["tcp"], "ppl": 1}, "tracing: Object contains unknown field `ppl`"),
        ([1, 2], "tracing: Expected `object`"),
    ],
)
def test_a_malformed_request_says_what_is_wrong(value: Any, error: str) -> None:
    with pytest.raises(ValueError) as exc:
        from_answer(value)
    assert error in str(exc.value)


def test_options_keep_the_command_lines_settings_the_request_does_not_name() -> None:
    own = Options(providers=("tcp", "skb-lifecycle"), ppl=8, skb_sample=256, skb_stages="ends", exclude_pid=7)
    assert options_for(own, None) == (own, COMMAND_LINE)
    kept, origin = options_for(own, TracingRequest(("tcp", "udp", "skb-lifecycle")))
    assert origin == DASHBOARD
    assert (kept.providers, kept.ppl, kept.skb_sample, kept.skb_stages, kept.exclude_pid) == (
        ("tcp", "udp", "skb-lifecycle"), 8, 256, "ends", 7,
    )  # fmt: skip
    full, _ = options_for(own, TracingRequest(("skb-lifecycle",), 1))
    assert (full.skb_sample, full.skb_stages) == (1, None)  # every buffer: its stages follow (all)


def test_the_windows_of_a_request_replace_the_collectors_own_or_leave_them() -> None:
    own = Options(providers=("tcp", "skb-lifecycle"), skb_sample=64, skb_window=WindowSpec(0.2, 2.0))
    request = TracingRequest(("tcp", "skb-lifecycle"), None, "0.50/10")
    assert from_answer(to_answer(request)) == TracingRequest(("tcp", "skb-lifecycle"), None, "0.5/10")
    assert to_answer(TracingRequest(("tcp",))) == {"providers": ["tcp"], "skb_sample": None}  # unnamed: absent
    assert options_for(own, from_answer(to_answer(request)))[0].skb_window == WindowSpec(0.5, 10.0)
    assert options_for(own, TracingRequest(("tcp", "skb-lifecycle"), 1, "0"))[0].skb_window is None  # all the time
    kept, _ = options_for(own, TracingRequest(("tcp", "udp", "skb-lifecycle")))
    assert (kept.skb_sample, kept.skb_window) == (64, WindowSpec(0.2, 2.0))

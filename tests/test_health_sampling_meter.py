"""H2: the sampling meter turns the kernel's exact counters and the records emitted into one
sampling_report per sampled event type and window (collector/health/sampling.py). The
real collector's reports are tested in tests/test_collect_selfhealth.py."""

from __future__ import annotations

from typing import Any

from collector.health.sampling import SamplingMeter
from translators.kernel import KernelEnv
from translators.skb_window import WindowSpec

ENV = KernelEnv(host_id="h1", boot_id="b1", wall_offset=0.0)


def flow(conn: str, skbs: int, samples: int, proto: str = "tcp") -> dict[str, Any]:
    """A flow_counters record of `skbs` buffers, each standing for 3 segments (GSO/GRO): the
    kernel samples one buffer in ppl, so the meter must count buffers, not segments."""
    return {"kind": "flow_counters", "conn_uuid": conn, "sock_cookie": hash(conn), "proto": proto,
            "packets_in": 2 * skbs, "packets_out": skbs, "skbs": skbs, "samples": samples}  # fmt: skip


def test_nothing_sampled_means_an_inactive_meter():
    assert not SamplingMeter(ppl=1, ip_sample=0, drop_rate=0).active
    assert not SamplingMeter(ppl=1, ip_sample=4, drop_rate=0, ip_records=True).active  # ip records every packet


def test_siftr_windows_count_each_flows_buffers_and_samples_since_its_last_report():
    m = SamplingMeter(ppl=8, ip_sample=0, drop_rate=0)
    m.observe([flow("a", 800, 100), flow("b", 8, 1), flow("u", 100, 0, proto="udp")])
    [first] = m.records(ENV)
    assert (first.event_type, first.setting, first.observed, first.emitted, first.ratio) == (
        "siftr_sample", "ppl 8", 808, 101, 8.0
    )  # fmt: skip
    m.observe([flow("a", 1600, 200)])  # periodic report: 800 buffers, 100 samples more
    m.observe([flow("b", 16, 2)])  # b's final counters at tcp_destroy_sock
    [second] = m.records(ENV)
    assert (second.observed, second.emitted, second.ratio) == (808, 101, 8.0)
    assert m.records(ENV) == []  # no packet counted in this window: no report


def test_ip_sample_and_the_drop_budget_are_reported_with_their_settings():
    m = SamplingMeter(ppl=1, ip_sample=4, drop_rate=100)
    entry = {"kind": "ip_flow_counters", "netns": 1, "if_index": 1, "direction": "send", "protocol": 17,
             "src": "10.0.0.1", "sport": 5, "dst": "10.0.0.2", "dport": 6, "start_ts_ns": 9}  # fmt: skip
    m.observe([{**entry, "packets_delta": 40, "samples": 10}, {"kind": "drop_count", "delta": 500}], drop_events=200)
    m.observe([{**entry, "packets_delta": 8, "samples": 12}])
    reports = {r.event_type: r for r in m.records(ENV)}
    assert (reports["ip_packet"].setting, reports["ip_packet"].observed, reports["ip_packet"].emitted) == (
        "ip-sample 4", 48, 12
    )  # fmt: skip
    assert reports["ip_packet"].ratio == 4.0
    drops = reports["skb_drop"]
    assert (drops.setting, drops.observed, drops.emitted, drops.ratio) == ("drop-rate 100/s per CPU", 500, 200, 2.5)


def test_a_window_whose_events_were_all_suppressed_has_no_ratio():
    m = SamplingMeter(ppl=1, ip_sample=0, drop_rate=1)
    m.observe([{"kind": "drop_count", "delta": 30}], drop_events=0)
    [r] = m.records(ENV)
    assert (r.observed, r.emitted, r.ratio) == (30, 0, None)


def test_lifecycle_windows_report_their_open_time_also_when_they_saw_nothing():
    m = SamplingMeter(ppl=1, ip_sample=0, drop_rate=0, skb_sample=64, skb_window=WindowSpec(0.2, 2.0))
    m.observe([], lifetimes=(6400, 100), open_s=0.2)
    m.observe([], open_s=0.05)
    [first] = m.records(ENV)
    assert (first.setting, first.observed, first.emitted, first.ratio, first.open_s) == (
        "skb-sample 64, skb-window 0.2/2", 6400, 100, 64.0, 0.25
    )  # fmt: skip
    m.observe([], open_s=0.2)  # a window with no buffer in it: its time is said, with nothing seen
    [quiet] = m.records(ENV)
    assert (quiet.observed, quiet.emitted, quiet.ratio, quiet.open_s) == (0, 0, None, 0.2)
    assert m.records(ENV) == []  # no window open and nothing seen: no report
    # without windows a report carries no open time
    plain = SamplingMeter(ppl=1, ip_sample=0, drop_rate=0, skb_sample=8)
    plain.observe([], lifetimes=(80, 10), open_s=0.3)
    assert [r.open_s for r in plain.records(ENV)] == [None]

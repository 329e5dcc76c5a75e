"""H2 and H4 in the rule engine: K6/K7 say when they ran on sampled SIFTR data and at what
ratio; a collector above its CPU budget is a warning that says how to tighten it."""

from __future__ import annotations

from typing import Any

from tests.alert_streams import BOOT, HOST, Stream, engine, feed_all, only
from translators.records import CollectorStats, CollectorStatus, SamplingReport

MSS = 1000


def collapse(s: Stream, f: Any) -> list[Any]:
    """100 segments of cwnd, then 1 segment with data outstanding for 1.25 s (an RTO)."""
    recs = []
    for _ in range(20):
        s.advance(0.1)
        recs.append(s.siftr(f, snd_cwnd=100 * MSS, mss=MSS, snd_nxt=5000, snd_una=1000))
    for _ in range(6):
        s.advance(0.25)
        recs.append(s.siftr(f, snd_cwnd=1 * MSS, mss=MSS, snd_nxt=5000, snd_una=1000))
    return recs


def spike(s: Stream, f: Any) -> list[Any]:
    recs = []
    for v in [10_000] * 16 + [40_000] * 7:
        s.advance(0.1)
        recs.append(s.siftr(f, srtt=v))
    return recs


def status(s: Stream, ppl: int) -> CollectorStatus:
    s.seq += 1
    return CollectorStatus(host_id=HOST, boot_id=BOOT, seq=s.seq, ts_ns=1, ts_wall=s.t, provider="nettrail",
                           probe="status", providers=["tcp", "siftr"], attached={"tcp_probe": 1}, ppl=ppl)  # fmt: skip


def report(s: Stream, window_s: float, observed: int, emitted: int) -> SamplingReport:
    """The host's measured siftr sampling (configured ppl 4) over the last window."""
    s.seq += 1
    return SamplingReport(host_id=HOST, boot_id=BOOT, seq=s.seq, ts_ns=1, ts_wall=s.t, provider="nettrail",
                          probe="sampling", event_type="siftr_sample", setting="ppl 4", window_s=window_s,
                          observed=observed, emitted=emitted, ratio=round(observed / emitted, 3))  # fmt: skip


def stats(s: Stream, cpu_percent: float, by_type: dict[str, int], interval_s: float = 10.0) -> CollectorStats:
    s.seq += 1
    events = sum(by_type.values())
    return CollectorStats(
        host_id=HOST, boot_id=BOOT, seq=s.seq, ts_ns=1, ts_wall=s.t, provider="nettrail", probe="stats", pid=777,
        tgid=777, comm="nettrail", interval_s=interval_s, cpu_time_s=cpu_percent / 100 * interval_s,
        cpu_total_s=100.0, cpu_percent=cpu_percent, events=events, events_per_s=events / interval_s,
        records=events, events_by_type=by_type,
    )  # fmt: skip


def test_k6_says_it_ran_on_sampled_data_with_the_flows_own_ratio():
    s, e = Stream(), engine()
    f = s.flow()
    counted = s.counters(f, packets_in=4000, packets_out=4000, samples=1000)  # the kernel's exact counts
    alerts = only(feed_all(e, [counted, *collapse(s, f)]), "K6")
    assert [(a.condition, a.sampling_ratio) for a in alerts] == [("collapse", 8.0)]
    assert "Computed from sampled data: one SIFTR sample per 8.0 packets of this connection" in alerts[0].message


def test_the_ratio_is_the_latest_windows_not_the_flows_lifetime():
    s, e = Stream(), engine()
    f = s.flow()
    first = s.counters(f, packets_in=400, packets_out=400, samples=100)  # 8 packets per sample so far
    s.advance(1)
    second = s.counters(f, packets_in=600, packets_out=600, samples=300)  # this window: 400 / 200
    alerts = only(feed_all(e, [first, second, *collapse(s, f)]), "K6")
    assert [a.sampling_ratio for a in alerts] == [2.0]


def test_a_window_across_a_new_collector_session_counts_from_zero():
    """A swap of the collector's programs (or a restart) starts siftr's counts again; its
    collector_status comes first. The next report is that session's own window (3000 skbs
    / 120 samples = 25), not its difference from the old session's totals (2000 / 20)."""
    s, e = Stream(), engine()
    f = s.flow()
    old = s.counters(f, packets_in=0, packets_out=0, skbs=1000, samples=100)
    s.advance(1)
    started = status(s, ppl=8)
    s.advance(1)
    new = s.counters(f, packets_in=0, packets_out=0, skbs=3000, samples=120)
    alerts = only(feed_all(e, [old, started, new, *collapse(s, f)]), "K6")
    assert [a.sampling_ratio for a in alerts] == [25.0]


def test_a_window_of_a_few_samples_extends_into_the_next_instead_of_reading_as_unsampled():
    # A blackout's report window holds one retransmit, sampled at ppl 3: 1 packet / 1 sample.
    # Seen on a real ppl 3 run (tests/test_alerts_sampled_kernel.py): K6 then said nothing.
    s = Stream()
    f = s.flow()
    full = s.counters(f, packets_in=1500, packets_out=1500, samples=1000)  # 3 packets per sample
    s.advance(0.5)
    one = s.counters(f, packets_in=1500, packets_out=1501, samples=1001)  # this window: 1 / 1
    alerts = only(feed_all(engine(), [full, one, *collapse(s, f)]), "K6")
    assert [a.sampling_ratio for a in alerts] == [3.0]
    assert "one SIFTR sample per 3.0 packets" in alerts[0].message
    # the short window is not lost: it extends into the next report (63 packets / 16 samples)
    s = Stream()
    f = s.flow()
    full = s.counters(f, packets_in=1500, packets_out=1500, samples=1000)
    s.advance(0.5)
    one = s.counters(f, packets_in=1500, packets_out=1501, samples=1001)
    s.advance(0.5)
    rest = s.counters(f, packets_in=1520, packets_out=1543, samples=1016)
    alerts = only(feed_all(engine(), [full, one, rest, *collapse(s, f)]), "K6")
    assert [a.sampling_ratio for a in alerts] == [3.94]


def test_a_hosts_sampling_report_of_a_few_samples_leaves_its_ppl_in_force():
    s, e = Stream(), engine()
    f = s.flow()
    sparse = report(s, window_s=0.5, observed=1, emitted=1)
    alerts = only(feed_all(e, [status(s, ppl=4), sparse, *spike(s, f)]), "K7")
    assert [a.sampling_ratio for a in alerts] == [4.0]


def test_k6_fired_by_a_congestion_state_change_still_says_its_cwnd_series_was_sampled():
    s, e = Stream(), engine()
    f = s.flow()
    recs = [s.counters(f, packets_in=4000, packets_out=4000, samples=1000), *collapse(s, f)[:24]]  # held 0.75 s
    s.advance(0.25)
    recs.append(s.cong(f, "Loss", snd_cwnd=1 * MSS))  # exact, but it extends a collapse seen in samples
    alerts = only(feed_all(e, recs), "K6")
    assert [(a.evidence[-1], a.sampling_ratio) for a in alerts] == [(recs[-1].seq, 8.0)]
    assert "one SIFTR sample per 8.0 packets" in alerts[0].message


def test_an_alerts_ratio_is_its_latest_firings_the_one_its_sentence_states():
    s, e = Stream(), engine()
    f = s.flow()
    recs = [s.counters(f, packets_in=1600, packets_out=1600, samples=400), *spike(s, f)]  # fires at 8.0
    s.advance(0.1)
    recs.append(s.counters(f, packets_in=1700, packets_out=1700, samples=450))  # this window: 200 / 50
    for _ in range(3):  # the spike goes on: fired again, now at 4.0
        s.advance(0.1)
        recs.append(s.siftr(f, srtt=40_000))
    out = only(feed_all(e, recs), "K7")
    assert out[0].sampling_ratio == 8.0
    last = only(feed_all(e, [], tick_every=None) + e.finish(), "K7")[-1]
    assert (last.count, last.sampling_ratio) == (4, 4.0)  # the last spike sample of spike(), then 3 more
    assert "one SIFTR sample per 4.0 packets" in last.message


def test_k7_uses_the_hosts_ppl_before_the_flows_first_counters():
    s, e = Stream(), engine()
    f = s.flow()
    alerts = only(feed_all(e, [status(s, ppl=4), *spike(s, f)]), "K7")
    assert [(a.condition, a.sampling_ratio) for a in alerts] == [("spike", 4.0)]
    assert "one SIFTR sample per 4.0 packets" in alerts[0].message


def test_a_hosts_measured_sampling_report_overrides_its_configured_ppl():
    s, e = Stream(), engine()
    f = s.flow()
    measured = report(s, window_s=1.0, observed=3999, emitted=1000)
    alerts = only(feed_all(e, [status(s, ppl=4), measured, *spike(s, f)]), "K7")
    assert [a.sampling_ratio for a in alerts] == [4.0]  # rounded to 2 decimals


def test_unsampled_data_carries_no_ratio_and_no_sampling_sentence():
    s, e = Stream(), engine()
    f, g = s.flow(), s.flow()
    every = s.counters(f, packets_in=500, packets_out=500, samples=1000)  # ppl 1: a sample per packet
    alerts = [a for a in feed_all(e, [status(s, ppl=1), every, *collapse(s, f), *spike(s, g)]) if a.rule_id != "H1"]
    assert sorted((a.rule_id, a.sampling_ratio) for a in alerts) == [("K6", None), ("K7", None)]
    assert all("sampled" not in a.message for a in alerts)


def test_h4_warns_above_5_percent_of_a_cpu_and_names_the_busiest_event_type_and_the_switch():
    s, e = Stream(), engine()
    quiet = stats(s, 3.0, {"siftr_sample": 20_000})
    s.advance(10)
    busy = stats(s, 12.5, {"siftr_sample": 600_000, "tcp_state": 40})
    alerts = only(feed_all(e, [quiet, busy]), "H4")
    assert [(a.condition, a.severity, a.metric, a.evidence) for a in alerts] == [("cpu", "warning", 12.5, [busy.seq])]
    a = alerts[0]
    assert a.thresholds == {"max_cpu_percent": 5.0, "window_s": 10}
    assert a.message.startswith("The collector (pid 777) used 12.5% of one CPU over 10.0 s, above the 5% budget")
    assert "mostly siftr_sample (60,000/s)" in a.message
    assert "raise --ppl" in a.message and "--filter port=" in a.message
    assert (a.host_id, a.conn_uuid, a.src) == (HOST, None, None)


def test_h4_closes_once_the_collector_is_back_under_budget_for_two_intervals():
    s, e = Stream(), engine()
    recs = [stats(s, 9.0, {"skb_drop": 50_000})]
    for _ in range(3):
        s.advance(10)
        recs.append(stats(s, 1.0, {"skb_drop": 100}))
    alerts = only(feed_all(e, recs, tick_every=1.0), "H4")
    assert [(a.status, a.count) for a in alerts] == [("open", 1), ("closed", 1)]
    assert "--drop-rate" in alerts[0].message


def test_h4_threshold_is_configurable():
    s = Stream()
    busy = stats(s, 12.5, {"ip_packet": 10})
    assert only(feed_all(engine(H4={"max_cpu_percent": 20.0}), [busy]), "H4") == []
    assert len(only(feed_all(engine(H4={"max_cpu_percent": 0.5}), [busy]), "H4")) == 1

"""The rule engine itself: grouping, hysteresis, re-fire suppression, configuration, run()."""

from __future__ import annotations

import pytest

from analysis.alerts.config import ConfigError, load_config
from analysis.alerts.engine import RuleEngine, run
from tests.alert_streams import Stream, engine, feed_all, only


def zero_window_drops(s: Stream, n: int, dt: float, dport: int = 7000):
    out = []
    for _ in range(n):
        s.advance(dt)
        out.append(s.drop("TCP_ZEROWINDOW", "10.0.0.9", 5001, "10.0.0.2", dport))
    return out


def test_it_groups_repeated_firing_of_one_rule_and_flow_into_one_alert_with_a_count():
    s, e = Stream(), engine()
    recs = zero_window_drops(s, 500, 0.01)
    alerts = feed_all(e, recs)
    assert len(alerts) == 1 and alerts[0].count == 1
    closed = e.tick(s.t + 20)
    assert [(a.status, a.count, a.alert_id, len(a.evidence)) for a in closed] == [
        ("closed", 500, alerts[0].alert_id, 32)
    ]
    assert closed[0].evidence == [r.seq for r in recs[:32]]  # bounded evidence: the first 32


def test_it_closes_only_after_two_clear_windows():
    s, e = Stream(), engine()
    feed_all(e, zero_window_drops(s, 1, 0))
    assert e.tick(s.t + 19.9) == []  # K5 window 10 s: still within 2 windows
    closed = e.tick(s.t + 20.0)
    assert [(a.status, a.end) for a in closed] == [("closed", s.t)]


def test_it_reopens_a_recently_closed_alert_under_its_id_and_reports_it_at_the_next_close():
    s, e = Stream(), engine()
    first = feed_all(e, zero_window_drops(s, 1, 0))
    closed = e.tick(s.t + 25)
    s.advance(60)  # re-fire 35 s after the close: inside the 5 min suppression
    # not a new alert: the same one, open again with its present count (issue 34: a
    # version left saying "closed" while the condition fires again would be stale)
    reopened = feed_all(e, zero_window_drops(s, 2, 0.1))
    assert [(a.status, a.count) for a in reopened] == [("open", 2)]
    again = e.tick(s.t + 25)
    assert [a.alert_id for a in first + closed + reopened + again] == [first[0].alert_id] * 4
    assert [(a.status, a.count) for a in again] == [("closed", 3)]
    s.advance(400)  # beyond the suppression: a new alert
    fresh = feed_all(e, zero_window_drops(s, 1, 0))
    assert len(fresh) == 1 and fresh[0].alert_id != first[0].alert_id


def test_it_emits_the_final_state_of_open_alerts_at_the_end_of_the_stream():
    s, e = Stream(), engine()
    feed_all(e, zero_window_drops(s, 3, 0.1))
    final = e.finish()
    assert [(a.status, a.count) for a in final] == [("open", 3)]
    assert e.finish() == []  # nothing moved since


def test_every_alert_carries_the_envelope_and_a_seq_far_above_collector_seqs():
    s, e = Stream(), engine()
    [a] = feed_all(e, zero_window_drops(s, 1, 0))
    assert (a.kind, a.provider, a.probe, a.host_id, a.boot_id) == ("alert", "nettrail", "alert", "h1", "b1")
    assert a.seq == 1 << 62
    assert a.ts_ns == 1 + int(0 * 1e9)  # the trigger's kernel time
    assert a.thresholds == {"window_s": 10, "zero_window_s": 1.0}


def test_it_caps_open_alerts_by_closing_the_least_recently_fired():
    s, e = Stream(), engine(engine={"max_open_alerts": 3})
    alerts = []
    for port in range(4):
        alerts += feed_all(e, zero_window_drops(s, 1, 0.1, dport=7000 + port))
    assert [(a.dport, a.status) for a in alerts] == [
        (7000, "open"),
        (7001, "open"),
        (7002, "open"),
        (7000, "closed"),
        (7003, "open"),
    ]


def test_it_bounds_per_flow_state_by_the_configured_caps():
    s, e = Stream(), engine(engine={"max_flows": 100, "max_keys": 50})
    for i in range(1000):
        f = s.flow(dst=f"10.{i // 250}.{i % 250}.1")
        e.feed(s.state(f, "CLOSED", "SYN_SENT"))
        e.feed(s.siftr(f, snd_nxt=5, snd_cwnd=10_000, srtt=100))
    assert len(e.flows) == 100
    sizes = {type(r).__name__: [len(getattr(r, n)) for n in vars(r) if hasattr(getattr(r, n), "cap")] for r in e.rules}
    for name, lens in sizes.items():
        assert all(n <= 100 for n in lens), (name, lens)


def test_it_disables_rules_from_the_configuration():
    e = engine(K5={"enabled": False})
    s = Stream()
    assert only(feed_all(e, zero_window_drops(s, 3, 0.1)), "K5") == []
    assert "K5" not in [r.rule_id for r in e.rules]


def test_it_loads_a_rules_file_named_by_the_environment(tmp_path):
    p = tmp_path / "rules.toml"
    p.write_text("[K1]\nmin_ratio = 0.05\n[engine]\nmax_flows = 10\n")
    cfg = load_config(env={"NETTRAIL_RULES": str(p)})
    assert cfg.params("K1")["min_ratio"] == 0.05 and cfg.params("K1")["min_retrans"] == 10
    assert cfg.engine["max_flows"] == 10 and cfg.source == str(p)
    assert RuleEngine(cfg).config.thresholds("K1")["min_ratio"] == 0.05


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[K99]\nenabled = true\n", "unknown section [K99]"),
        ("[K1]\nmin_rato = 0.05\n", "unknown key K1.min_rato"),
        ("[K1]\nmin_ratio = 'high'\n", "K1.min_ratio must be a number, got 'high'"),
        ("[K1]\nenabled = 1\n", "K1.enabled must be true or false"),
        ("[K1]\nwindow_s = -3\n", "K1.window_s must be >= 0"),
        ("[K1\n", "not valid TOML"),
    ],
)
def test_it_rejects_a_bad_rules_file_naming_the_key(tmp_path, text, error):
    p = tmp_path / "rules.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    assert str(p) in str(exc.value) and error in str(exc.value)


def test_it_says_when_the_rules_file_is_missing(tmp_path):
    with pytest.raises(ConfigError, match="rules file not found"):
        load_config(tmp_path / "nope.toml")


def test_run_passes_records_through_and_interleaves_alerts_right_after_their_trigger():
    s = Stream()
    recs = zero_window_drops(s, 2, 0.5)
    out = list(run(iter(recs), engine=engine()))
    assert [r.kind for r in out] == ["skb_drop", "alert", "skb_drop", "alert"]
    assert out[0] is recs[0] and out[2] is recs[1]
    assert [(a.status, a.count) for a in out if a.kind == "alert"] == [("open", 1), ("open", 2)]


def test_run_sweeps_on_heartbeats_so_timeouts_fire_in_quiet_periods():
    s = Stream()
    f = s.flow()
    start = s.state(f, "CLOSED", "SYN_SENT")
    clock = iter([s.t + 1, s.t + 4])
    out = list(run(iter([start, None, None]), engine=engine(), clock=lambda: next(clock)))
    assert [(r.kind, getattr(r, "condition", None)) for r in out] == [("tcp_state", None), ("alert", "syn-sent")]


def test_it_ignores_alert_records_fed_back_in():
    s, e = Stream(), engine()
    [a] = feed_all(e, zero_window_drops(s, 1, 0))
    assert e.feed(a) == [] and e.records == 1

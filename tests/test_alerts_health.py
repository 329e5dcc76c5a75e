"""H1: collector loss is an alert, and it marks other alerts of the window incomplete."""

from __future__ import annotations

from tests.alert_streams import Stream, engine, feed_all, only


def test_it_warns_on_any_lost_event_and_turns_critical_above_1_percent():
    s, e = Stream(), engine()
    recs = [s.loss("tcp_probe", 0, 0, 100_000)]
    s.advance(1)
    recs.append(s.loss("tcp_probe", 5, 5, 200_000))  # 5 of 100,005 in the window
    s.advance(1)
    recs.append(s.loss("tcp_probe", 5000, 5005, 300_000))  # 5,005 of 205,005
    alerts = only(feed_all(e, recs), "H1")
    assert [(a.condition, a.severity, a.count) for a in alerts] == [
        ("lost-events", "warning", 1),
        ("lost-events", "critical", 2),
    ]
    assert alerts[0].metric == 5 / 100_005
    assert alerts[1].evidence == [recs[1].seq, recs[2].seq]
    assert (alerts[0].src, alerts[0].conn_uuid, alerts[0].host_id) == (None, None, "h1")
    assert "lost 5 tcp_probe events" in alerts[0].message


def test_it_warns_when_the_kernel_skipped_runs_of_a_program_and_marks_the_window_incomplete():
    s, e = Stream(), engine()
    d1 = s.drop("TCP_ZEROWINDOW", "10.0.0.9", 5001, "10.0.0.2", 7000)
    s.advance(1)
    runs = [s.skipped("tcp_probe", 0, 0), s.skipped("tcp_probe", 240, 240)]
    s.advance(1)
    runs.append(s.skipped("tcp_probe", 60, 300))
    alerts = feed_all(e, [d1, *runs])
    h1 = only(alerts, "H1")
    assert [(a.condition, a.severity, a.count, a.metric, a.incomplete) for a in h1] == [
        ("skipped-runs", "warning", 1, 240.0, True)
    ]
    assert "skipped 240 runs of nettrail's tcp_probe program in 10 s, 240 since the collector started" in h1[0].message
    closed = e.tick(s.t + 25)
    # no count of all runs to weigh them against: a warning however many, never critical
    [last] = [a for a in closed if a.rule_id == "H1"]
    assert (last.status, last.severity, last.count, last.metric) == ("closed", "warning", 2, 300.0)
    assert last.evidence == [runs[1].seq, runs[2].seq]
    assert [(a.status, a.incomplete) for a in closed if a.rule_id == "K5"] == [("closed", True)]


def test_it_stays_quiet_when_the_collector_reports_no_loss():
    s, e = Stream(), engine()
    recs = [s.loss("tcp_probe", 0, 0, n * 1000) for n in range(10)]
    assert feed_all(e, recs) == []


def test_it_marks_alerts_that_overlap_a_loss_window_as_incomplete():
    s, e = Stream(), engine()
    d1 = s.drop("TCP_ZEROWINDOW", "10.0.0.9", 5001, "10.0.0.2", 7000)
    s.advance(1)
    loss = s.loss("skb_drop", 3, 3, 10)
    first = feed_all(e, [d1, loss])
    # the K5 alert was emitted before the loss was known; the H1 alert is itself incomplete data
    assert [(a.rule_id, a.incomplete) for a in first] == [("K5", None), ("H1", True)]
    s.advance(100)
    later = feed_all(e, [s.drop("TCP_ZEROWINDOW", "10.0.0.9", 5002, "10.0.0.2", 7001)])
    assert [(a.rule_id, a.incomplete) for a in later] == [("K5", None)]  # long after the loss window
    closed = e.tick(s.t + 25)
    k5_closed = [a for a in closed if a.rule_id == "K5" and a.dport == 7000]
    assert [(a.status, a.incomplete) for a in k5_closed] == [("closed", True)]


def test_it_marks_alerts_incomplete_even_with_h1_disabled():
    s, e = Stream(), engine(H1={"enabled": False})
    first = feed_all(e, [s.drop("TCP_ZEROWINDOW", "10.0.0.9", 5001, "10.0.0.2", 7000), s.loss("skb_drop", 3, 3, 10)])
    assert [a.rule_id for a in first] == ["K5"]
    closed = e.tick(s.t + 25)
    assert [(a.rule_id, a.status, a.incomplete) for a in closed] == [("K5", "closed", True)]

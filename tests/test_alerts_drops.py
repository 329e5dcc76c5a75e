"""K12: bursts of skb drop reasons not owned by a more specific rule."""

from __future__ import annotations

from tests.alert_streams import Stream, engine, feed_all, only


def test_it_notices_netfilter_drops_per_flow():
    s, e = Stream(), engine()
    d = s.drop("NETFILTER_DROP", "10.0.0.1", 40000, "10.0.0.2", 22, drop_location="nft_do_chain+0x4b")
    alerts = only(feed_all(e, [d]), "K12")
    assert len(alerts) == 1
    a = alerts[0]
    assert (a.condition, a.severity, a.src, a.sport, a.dst, a.dport, a.proto) == (
        "netfilter_drop",
        "notice",
        "10.0.0.1",
        40000,
        "10.0.0.2",
        22,
        "tcp",
    )
    assert "dropped with reason NETFILTER_DROP at nft_do_chain+0x4b" in a.message and "firewall" in a.message


def test_its_latest_version_counts_every_drop_of_the_flow_and_names_portless_packets_without_ports():
    """Issue 34: a PMTU black hole's ICMP drops read "1 packet of 10.77.3.1:0 -> 10.77.3.2:0"
    at count 11. The updates (one per 10 s) and the final version say the present."""
    s, e = Stream(), engine()
    recs = []
    for _ in range(11):
        recs.append(s.drop("NETFILTER_DROP", "10.77.3.1", 0, "10.77.3.2", 0, l4="icmp"))
        s.advance(1.0)
    alerts = only(feed_all(e, recs), "K12")
    # the first at t=0; the 11th drop, 10 s later, is due an update: the present state
    assert [(a.alert_id, a.count, a.metric) for a in alerts] == [
        (alerts[0].alert_id, 1, 1.0),
        (alerts[0].alert_id, 11, 10.0),
    ]
    assert alerts[0].message.startswith("1 packet of icmp 10.77.3.1 -> 10.77.3.2 dropped with reason NETFILTER_DROP")
    assert alerts[1].message.startswith("10 packets of icmp 10.77.3.1 -> 10.77.3.2 dropped")  # in the last 10 s
    assert e.finish() == []  # nothing moved since that version


def test_it_ignores_old_sequence_drops_that_keepalive_probes_and_spurious_retransmits_cause():
    # seen on real loopback traffic (tests/test_alerts_kernel.py clean and queueing runs)
    s, e = Stream(), engine()
    recs = [s.drop("TCP_OLD_SEQUENCE", "127.0.0.1", 41564, "127.0.0.1", 8000) for _ in range(3)]
    assert only(feed_all(e, recs), "K12") == []
    d = s.drop("TCP_INVALID_SEQUENCE", "127.0.0.1", 41564, "127.0.0.1", 8000)
    assert [a.condition for a in only(feed_all(e, [d]), "K12")] == ["tcp_invalid_sequence"]


def test_it_warns_on_qdisc_drops_above_100_per_second_for_10_seconds():
    s, e = Stream(), engine()
    recs = []
    for sec in range(12):
        for i in range(101):
            s.t = 1_700_000_000.0 + sec + i / 101
            recs.append(s.drop("QDISC_DROP", "10.0.0.1", 40000, "10.0.0.2", 80))
    alerts = only(feed_all(e, recs), "K12")
    assert len(alerts) == 1
    assert (alerts[0].severity, alerts[0].condition, alerts[0].src, alerts[0].ts_wall) == (
        "warning",
        "qdisc_drop",
        None,
        1_700_000_010.0,
    )


def test_it_does_not_warn_on_a_short_or_light_qdisc_drop_rate():
    s, e = Stream(), engine()
    recs = []
    for sec in range(30):
        for i in range(60 if sec % 2 else 150):  # bursts over 100/s, never 10 s in a row
            s.t = 1_700_000_000.0 + sec + i / 150
            recs.append(s.drop("QDISC_DROP", "10.0.0.1", 40000, "10.0.0.2", 80))
    assert only(feed_all(e, recs), "K12") == []


def test_it_notices_a_burst_of_any_other_reason_and_ignores_background_reasons():
    s, e = Stream(), engine()
    recs = [s.drop("IP_INHDR", "10.0.0.1", None, "10.0.0.2", None, l4=None) for _ in range(100)]
    recs += [s.drop("SOCKET_CLOSE", "10.0.0.1", 1, "10.0.0.2", 2) for _ in range(5000)]
    recs += [s.drop("NOT_SPECIFIED", "10.0.0.1", 1, "10.0.0.2", 2) for _ in range(5000)]
    alerts = only(feed_all(e, recs), "K12")
    assert [(a.condition, a.severity, a.metric) for a in alerts] == [("ip_inhdr", "notice", 100.0)]


def test_it_leaves_reasons_owned_by_other_rules_to_them():
    s, e = Stream(), engine()
    recs = [s.drop("TCP_LISTEN_OVERFLOW", "10.0.0.1", 1, "10.0.0.2", 80) for _ in range(200)]
    alerts = feed_all(e, recs)
    assert {a.rule_id for a in alerts} == {"K4"}


def test_it_prefers_exact_drop_counts_over_rate_limited_events():
    s, e = Stream(), engine()
    recs = [s.drop("IP_INHDR", "10.0.0.1", None, "10.0.0.2", None, l4=None) for _ in range(10)]
    recs.append(s.drop_count("IP_INHDR", 120, 120))  # the kernel map saw 120, events were sampled
    alerts = only(feed_all(e, recs), "K12")
    assert [(a.condition, a.metric) for a in alerts] == [("ip_inhdr", 120.0)]


def test_it_warns_on_repeated_reachability_drops_and_md5_failures():
    s, e = Stream(), engine()
    recs = [s.drop("NEIGH_FAILED", "10.0.0.1", None, "10.0.0.99", None, l4=None) for _ in range(3)]
    recs.append(s.drop("TCP_MD5FAILURE", "10.0.0.7", 179, "10.0.0.2", 33000))
    alerts = only(feed_all(e, recs), "K12")
    assert [(a.condition, a.severity) for a in alerts] == [("neigh_failed", "warning"), ("tcp_md5failure", "warning")]


def received(s: Stream, local: tuple[str, int], remote: tuple[str, int], packets_in: int):
    from tests.alert_streams import Flow

    return s.counters(Flow(local[0], local[1], remote[0], remote[1], 7000), packets_in=packets_in)


def test_it_warns_when_sequence_drops_exceed_one_percent_of_the_flows_received_segments():
    s, e = Stream(), engine()
    local, peer = ("10.0.0.2", 8000), ("10.0.0.1", 41000)
    recs = [received(s, local, peer, 150)]
    s.advance(0.5)
    recs += [s.drop("TCP_INVALID_SEQUENCE", *peer, *local) for _ in range(2)]
    alerts = only(feed_all(e, recs), "K12")  # 2 of 150 is 1.3 %
    assert [(a.condition, a.severity) for a in alerts] == [
        ("tcp_invalid_sequence", "notice"),  # the first drop: 1 of 150 is under 1 %
        ("tcp_invalid_sequence", "warning"),  # the second escalates the same alert
    ]
    assert alerts[0].alert_id == alerts[1].alert_id
    assert "(1.3% of the 150 segments it received)" in alerts[1].message


def test_it_keeps_sequence_drops_a_notice_under_one_percent_or_without_segment_counts():
    s, e = Stream(), engine()
    local, peer = ("10.0.0.2", 8000), ("10.0.0.1", 41000)
    recs = [received(s, local, peer, 400), s.drop("TCP_OVERWINDOW", *peer, *local)]
    recs += [s.drop("TCP_INVALID_SEQUENCE", "10.0.0.9", 5000, "10.0.0.2", 9000) for _ in range(5)]  # no counters
    recs += [received(s, ("10.0.0.2", 7000), ("10.0.0.3", 7001), 50)]
    recs += [s.drop("TCP_INVALID_SEQUENCE", "10.0.0.3", 7001, "10.0.0.2", 7000) for _ in range(5)]  # < 100 segs
    alerts = only(feed_all(e, recs), "K12")
    assert {a.severity for a in alerts} == {"notice"} and len({a.alert_id for a in alerts}) == 3


def policy_drops(s: Stream, seconds: int, per_second: int):
    recs = []
    for _ in range(seconds):
        recs += [s.drop("NETFILTER_DROP", "10.0.0.1", 40000 + i, "10.0.0.2", 22) for i in range(per_second)]
        s.advance(1.0)
    return recs


def test_it_warns_when_policy_drops_jump_against_their_baseline():
    s, e = Stream(), engine(K12={"policy_window_s": 2, "policy_baseline_s": 6})
    recs = policy_drops(s, 8, 2) + policy_drops(s, 3, 40)  # 2/s for 8 s, then 40/s
    alerts = only(feed_all(e, recs), "K12", "policy-rate-change")
    assert [(a.severity, a.src, a.dst, a.proto) for a in alerts] == [("warning", None, None, None)]
    a = alerts[0]  # opened in the first second of the jump, at its 18th drop: (2 + 18) / 2 s = 5 x 2/s
    assert a.metric == 10.0 and a.start == s.t - 3 and a.evidence[0] == recs[0].seq
    assert "jumped to 10.0 per second over the last 2 s from 2.00 per second in the 6 s before" in a.message


def test_steady_or_low_policy_drops_are_no_rate_change():
    s, e = Stream(), engine(K12={"policy_window_s": 2, "policy_baseline_s": 6})
    recs = policy_drops(s, 20, 30)  # steady 30/s from the start: no change to see
    recs += policy_drops(s, 5, 0) + policy_drops(s, 10, 8)  # a rise to 8/s: under policy_min_rate
    assert only(feed_all(e, recs), "K12", "policy-rate-change") == []


def test_exact_drop_counts_reported_about_once_a_second_are_spread_over_the_seconds_they_cover():
    # the collector reads its drop map every ~1.1 s: the report of second 2 may come at 3.05,
    # leaving second 2 without a report; spread over (previous report, this one], every
    # second of a steady 320 drops a second sustains the saturation rate
    s, e = Stream(), engine(K12={"saturation_seconds": 3})
    recs, total = [], 0
    for k in range(6):
        s.t = 1_700_000_000.0 + 0.95 + 1.1 * k
        total += 352
        recs.append(s.drop_count("QDISC_DROP", total, 352))
    alerts = only(feed_all(e, recs, tick_every=None), "K12", "qdisc_drop")
    assert [(a.severity, a.start) for a in alerts] == [("warning", recs[2].ts_wall)]  # seconds 0, 1, 2 covered
    assert "more than 100 per second for 3 s" in alerts[0].message


def test_a_burst_counted_after_a_quiet_hour_is_not_spread_over_the_hour():
    # a reason reports only when it moved: its previous report is an hour old, but the
    # collector read the map every second meanwhile, so the burst fits in the last second
    s, e = Stream(), engine(K12={"saturation_seconds": 2})
    recs = []
    for k in range(3):  # reads a second apart teach the cadence
        s.t = 1_700_000_000.0 + k
        recs.append(s.drop_count("QDISC_DROP", 1 + k, 1))
    total = 3
    for k in range(4):  # an hour later: 300 drops a second for 4 s
        s.t = 1_700_003_600.0 + k
        total += 300
        recs.append(s.drop_count("QDISC_DROP", total, 300))
    alerts = only(feed_all(e, recs, tick_every=None), "K12", "qdisc_drop")
    # each report covers the second before it: seconds 3599 and 3600 are over 100 at the second report
    assert [(a.severity, a.start) for a in alerts] == [("warning", recs[-3].ts_wall)]

"""K6 cwnd collapse and K7 srtt spikes against the destination's baseline."""

from __future__ import annotations

from tests.alert_streams import Stream, engine, feed_all, only

MSS = 1000


def test_it_warns_when_cwnd_collapses_to_one_segment_for_over_a_second_with_data_outstanding():
    s, e = Stream(), engine()
    f = s.flow()
    recs = []
    for _ in range(20):  # 100 segments of cwnd in flight
        s.advance(0.05)
        recs.append(s.siftr(f, snd_cwnd=100 * MSS, mss=MSS, snd_nxt=5000, snd_una=1000))
    collapsed = []
    for _ in range(6):  # an RTO: cwnd 1 segment, still outstanding, for 1.25 s
        s.advance(0.25)
        r = s.siftr(f, snd_cwnd=1 * MSS, mss=MSS, snd_nxt=5000, snd_una=1000)
        recs.append(r)
        collapsed.append(r.seq)
    alerts = only(feed_all(e, recs), "K6")
    assert len(alerts) == 1
    a = alerts[0]
    assert (a.condition, a.severity, a.metric, a.conn_uuid) == ("collapse", "warning", 1.0, f.uuid)
    assert a.evidence == collapsed[:5]  # the fifth collapsed sample is 1.0 s after the first
    assert "collapsed to 1 segment from a peak of 100 for 1.0 s" in a.message


def test_it_warns_when_cwnd_collapses_three_times_in_a_minute():
    s, e = Stream(), engine()
    f = s.flow()
    recs = []
    for _ in range(3):
        for _ in range(5):
            s.advance(0.5)
            recs.append(s.siftr(f, snd_cwnd=400 * MSS, snd_nxt=9000, snd_una=1000))
        s.advance(0.1)
        recs.append(s.siftr(f, snd_cwnd=30 * MSS, snd_nxt=9000, snd_una=1000))  # 7.5 % of the peak, briefly
    alerts = only(feed_all(e, recs), "K6")
    assert [(a.severity, a.metric) for a in alerts] == [("warning", 30.0)]
    assert "3 times in 60 s" in alerts[0].message


def test_it_ignores_a_small_cwnd_with_nothing_outstanding_and_a_halving_by_fast_recovery():
    s, e = Stream(), engine()
    f, g = s.flow(), s.flow()
    recs = []
    for _ in range(30):
        s.advance(0.1)
        recs.append(s.siftr(f, snd_cwnd=2 * MSS, snd_nxt=7000, snd_una=7000))  # idle: nothing in flight
        recs.append(s.siftr(g, snd_cwnd=100 * MSS, snd_nxt=9000, snd_una=1000))
    for _ in range(30):
        s.advance(0.1)
        recs.append(s.siftr(g, snd_cwnd=50 * MSS, snd_nxt=9000, snd_una=1000))  # CUBIC-like cut to 50-70 %
    assert only(feed_all(e, recs), "K6") == []


def rtt_stream(s, f, values, dt=0.1):
    recs = []
    for v in values:
        s.advance(dt)
        recs.append(s.siftr(f, srtt=v))
    return recs


def test_it_warns_after_five_srtt_samples_over_three_times_the_baseline_lasting_half_a_second():
    s, e = Stream(), engine()
    f = s.flow()
    base = rtt_stream(s, f, [10_000 + (i % 4) * 100 for i in range(16)])  # baseline ~10.1 ms
    spike = rtt_stream(s, f, [40_000] * 7)  # the 7th sample is 0.6 s after the first
    alerts = only(feed_all(e, base + spike), "K7")
    assert len(alerts) == 1
    a = alerts[0]
    assert (a.condition, a.severity, a.metric) == ("spike", "warning", 40_000.0)
    assert a.evidence == [r.seq for r in spike]
    assert "rose to 40.0 ms against the baseline of 10.15 ms of connections to 10.0.0.0/24 port 80" in a.message
    assert "no other connection to it spikes now" in a.message


def test_it_calls_an_srtt_200_ms_above_baseline_critical():
    s, e = Stream(), engine()
    f = s.flow()
    recs = rtt_stream(s, f, [1_000] * 16) + rtt_stream(s, f, [250_000] * 7)
    alerts = only(feed_all(e, recs), "K7")
    assert [(a.severity, a.metric) for a in alerts] == [("critical", 250_000.0)]


def test_it_ignores_microsecond_jitter_on_a_lan_flow_thanks_to_the_5_ms_floor():
    s, e = Stream(), engine()
    f = s.flow()
    values = [50 + (i * 37) % 400 for i in range(400)]  # 50-450 us: up to 9x the median, under +5 ms
    assert only(feed_all(e, rtt_stream(s, f, values)), "K7") == []


def test_it_ignores_a_burst_of_high_srtt_samples_shorter_than_half_a_second():
    s, e = Stream(), engine()
    f = s.flow()
    recs = rtt_stream(s, f, [200] * 16) + rtt_stream(s, f, [6_000] * 60, dt=0.0005) + rtt_stream(s, f, [200] * 5)
    assert only(feed_all(e, recs), "K7") == []  # a 30 ms scheduling hiccup on a loaded host


def test_it_fires_k7_on_a_two_second_spike_even_with_few_samples():
    s, e = Stream(), engine()
    f = s.flow()
    recs = rtt_stream(s, f, [2_000] * 16) + rtt_stream(s, f, [30_000] * 3, dt=1.1)
    alerts = only(feed_all(e, recs), "K7")
    assert [a.metric for a in alerts] == [30_000.0]
    assert alerts[0].ts_wall == recs[-1].ts_wall


def test_it_ignores_cwnd_cuts_in_the_open_and_recovery_states():
    s, e = Stream(), engine()
    f = s.flow()
    recs = []
    for k in range(10):  # cwnd validation after idle (Open), PRR dips in fast recovery
        s.advance(0.3)
        recs.append(s.siftr(f, snd_cwnd=53 * MSS, snd_nxt=9000, snd_una=1000, ca_state="Open"))
        s.advance(0.01)
        ca = "Open" if k % 2 else "Recovery"
        recs.append(s.siftr(f, snd_cwnd=2 * MSS, snd_nxt=9000, snd_una=1000, ca_state=ca))
    assert only(feed_all(e, recs), "K6") == []
    recs = []
    for _ in range(5):  # the same cut after a timeout: Loss state
        s.advance(0.3)
        recs.append(s.siftr(f, snd_cwnd=1 * MSS, snd_nxt=9000, snd_una=1000, ca_state="Loss"))
    assert [a.metric for a in only(feed_all(e, recs), "K6")] == [1.0]


def k7(e):
    [rule] = [r for r in e.rules if r.rule_id == "K7"]
    return rule


def test_k7_seeds_one_baseline_per_destination_across_connections():
    s, e = Stream(), engine()
    seeds = []
    for dst in ("10.0.0.7", "10.0.0.9", "10.0.0.7", "10.0.0.200"):  # one /24, one port: one destination
        seeds += rtt_stream(s, s.flow(dst=dst, dport=443), [2_000] * 4)
    fresh = s.flow(dst="10.0.0.8", dport=443)  # its first samples are judged against the others' baseline
    spike = rtt_stream(s, fresh, [20_000] * 7)  # 0.6 s: past min_hold_s
    elsewhere = rtt_stream(s, s.flow(dst="10.0.1.8", dport=443), [20_000] * 20)  # another /24: its own seed
    other_port = rtt_stream(s, s.flow(dst="10.0.0.8", dport=8443), [20_000] * 20)
    alerts = only(feed_all(e, seeds + spike + elsewhere + other_port), "K7")
    assert [(a.conn_uuid, a.metric, a.evidence) for a in alerts] == [(fresh.uuid, 20_000.0, [r.seq for r in spike])]
    assert "against the baseline of 2.00 ms of connections to 10.0.0.0/24 port 443" in alerts[0].message
    assert len(k7(e).dests) == 3


def test_k7_keys_ipv6_destinations_by_their_64():
    from analysis.alerts.rules.perf import destination

    assert destination("2001:db8:1:2:aa::5", 443) == ("2001:db8:1:2::/64", 443)
    assert destination("192.0.2.77", 53) == ("192.0.2.0/24", 53)


def test_k7_holds_the_destination_baseline_while_one_of_its_connections_spikes():
    s, e = Stream(), engine()
    a, b = s.flow(dst="10.0.0.7", dport=443), s.flow(dst="10.0.0.8", dport=443)
    recs = rtt_stream(s, a, [2_000] * 16)
    recs += rtt_stream(s, a, [40_000] * 7)  # a spikes: alert open
    recs += rtt_stream(s, b, [6_500] * 20)  # under the 7 ms limit, but not learnt while a's alert is open
    alerts = only(feed_all(e, recs), "K7")
    assert [x.conn_uuid for x in alerts] == [a.uuid]
    [d] = [d for _, d in k7(e).dests.items()]
    assert d.base == 2_000.0 and d.alerting == {a.uuid}
    s.advance(60)  # a's alert closes after two quiet windows; b's samples are learnt again
    e.tick(s.t)
    feed_all(e, rtt_stream(s, b, [6_500]))
    assert d.base > 2_000.0 and d.alerting == set()


def test_k7_says_when_other_connections_to_the_destination_spike_at_the_same_time():
    s, e = Stream(), engine()
    a, b = s.flow(dst="10.0.0.7", dport=443), s.flow(dst="10.0.0.8", dport=443)
    recs = rtt_stream(s, a, [2_000] * 16)
    for _ in range(7):
        recs += rtt_stream(s, a, [30_000]) + rtt_stream(s, b, [31_000], dt=0.01)
    alerts = only(feed_all(e, recs), "K7")
    # one finding for the destination (issue 34 item 1), its two connections as members
    assert [(x.conn_uuid, x.dport, x.members, x.member_conn_uuids) for x in alerts] == [
        (None, 443, 2, [a.uuid, b.uuid])
    ]
    assert alerts[0].message.startswith(
        "The smoothed RTT of 2 connections rose over the limit of 7.00 ms against the baseline of 2.00 ms of "
        "connections to 10.0.0.0/24 port 443, the latest (an unattributed socket toward 10.0.0.7:443) to 30.0 ms (6 samples over the limit)"
        "; 1 other connection to it spikes too: queueing on the path"
    )

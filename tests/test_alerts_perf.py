"""K6 cwnd collapse and K7 srtt spikes against the connection's own baseline."""

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
    assert "rose to 40.0 ms against its own baseline of 10.15 ms" in a.message


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

"""K8 stuck handshakes and K10 CLOSE_WAIT / FIN_WAIT_2 / TIME_WAIT, with the engine's sweeps."""

from __future__ import annotations

from tests.alert_streams import Flow, Stream, engine, feed_all, only


def test_it_notices_a_socket_stuck_in_syn_sent_for_over_3_seconds():
    s, e = Stream(), engine()
    f = s.flow(dst="10.0.0.5", dport=443)
    start = s.state(f, "CLOSED", "SYN_SENT")
    assert e.feed(start) == []
    assert e.tick(s.t + 2.9) == []
    alerts = e.tick(s.t + 3.5)
    assert len(alerts) == 1
    a = alerts[0]
    assert (a.rule_id, a.condition, a.severity, a.status, a.count) == ("K8", "syn-sent", "notice", "open", 1)
    # one finding per destination (issue 34 item 1), linking its member socket
    assert (a.conn_uuid, a.comm, a.dst, a.dport, a.evidence) == (None, "client", "10.0.0.5", 443, [start.seq])
    assert (a.members, a.member_conn_uuids) == (1, [f.uuid])
    assert a.message.startswith("1 connection of client (pid 4242) has been waiting in SYN_SENT for 10.0.0.5:443")
    assert e.tick(s.t + 8) == []  # still stuck: the same alert, no new version within 10 s
    s.advance(9)
    done = s.state(f, "SYN_SENT", "ESTABLISHED")
    assert e.feed(done) == []
    closed = e.tick(s.t + 20.5)
    assert [(c.alert_id, c.status, c.count) for c in closed] == [(a.alert_id, "closed", 1)]


def test_it_warns_when_over_20_sockets_wait_in_syn_sent_for_one_destination():
    s, e = Stream(), engine()
    recs = [s.state(s.flow(dst="10.0.0.5", dport=443), "CLOSED", "SYN_SENT") for _ in range(21)]
    feed_all(e, recs)
    alerts = e.tick(s.t + 4)
    # one warning for the destination (it was 21 notices plus a syn-sent-destination warning)
    dest = only(alerts, "K8")
    assert [(a.condition, a.severity, a.dst, a.dport, a.metric, a.members, a.conn_uuid) for a in dest] == [
        ("syn-sent", "warning", "10.0.0.5", 443, 21.0, 21, None)
    ]
    assert dest[0].member_conn_uuids == [r.conn_uuid for r in recs]


def test_it_notices_a_connect_timeout_but_not_a_refusal():
    s, e = Stream(), engine()
    f, g = s.flow(), s.flow()
    recs = [s.state(f, "CLOSED", "SYN_SENT"), s.state(g, "CLOSED", "SYN_SENT")]
    s.advance(0.01)
    recs += [s.reset(g, "peer", "SYN_SENT"), s.state(g, "SYN_SENT", "CLOSED")]
    s.advance(2.0)
    recs.append(s.state(f, "SYN_SENT", "CLOSED"))
    alerts = only(feed_all(e, recs, tick_every=None), "K8")
    assert [(a.condition, a.member_conn_uuids, a.severity) for a in alerts] == [("connect-timeout", [f.uuid], "notice")]
    assert "without any answer (no SYN-ACK, no RST), the latest after 2.0 s" in alerts[0].message


def test_it_warns_when_a_listener_retries_synacks_to_over_50_clients_that_never_finish():
    s, e = Stream(), engine()
    recs = []
    for i in range(51):
        s.advance(0.1)
        recs.append(s.retrans(Flow("10.0.0.2", 80, "10.9.9.9", 1000 + i, 0, None, None), retrans_kind="synack"))
    alerts = only(feed_all(e, recs), "K8", "server-half-open")
    assert [(a.severity, a.src, a.sport, a.metric) for a in alerts] == [("warning", "10.0.0.2", 80, 51.0)]


def close_wait(s: Stream, f: Flow):
    return [s.state(f, "SYN_RECEIVED", "ESTABLISHED"), s.state(f, "ESTABLISHED", "CLOSE_WAIT")]


def test_it_notices_a_socket_left_in_close_wait_beyond_60_seconds_at_the_10_second_sweep():
    s, e = Stream(), engine()
    f = s.flow(pid=31, comm="leaky")
    recs = close_wait(s, f)
    feed_all(e, recs)
    assert e.tick(s.t + 1) == []  # first sweep; the next one is due 10 s later
    assert e.tick(s.t + 59) == []  # sweeps; the next is due at +69
    assert e.tick(s.t + 61) == []  # past 60 s but between sweeps
    alerts = e.tick(s.t + 69)
    assert [(a.rule_id, a.condition, a.severity, a.comm, a.evidence) for a in alerts] == [
        ("K10", "close-wait", "notice", "leaky", [recs[1].seq])
    ]
    assert alerts[0].message.startswith(
        f"leaky (pid 31) on 10.0.0.1:{f.sport} holds 1 socket in CLOSE_WAIT, the oldest for 69 s"
    )
    assert "never called close()" in alerts[0].message
    assert (alerts[0].members, alerts[0].member_conn_uuids) == (1, [f.uuid])


def test_it_uses_the_configured_close_wait_timeout():
    s, e = Stream(), engine(K10={"close_wait_s": 2, "sweep_s": 1})
    f = s.flow()
    feed_all(e, close_wait(s, f))
    assert e.tick(s.t + 1.5) == []
    alerts = e.tick(s.t + 2.5)
    assert [(a.condition, a.thresholds["close_wait_s"]) for a in alerts] == [("close-wait", 2)]


def test_it_does_not_flag_a_close_wait_that_ends_in_time():
    s, e = Stream(), engine()
    f = s.flow()
    feed_all(e, close_wait(s, f))
    e.tick(s.t + 1)
    s.advance(50)
    e.feed(s.state(f, "CLOSE_WAIT", "LAST_ACK"))
    assert e.tick(s.t + 30) == [] and e.tick(s.t + 200) == []


def test_it_warns_when_one_process_holds_over_50_close_wait_sockets():
    s, e = Stream(), engine()
    recs = []
    for _ in range(51):
        recs += close_wait(s, s.flow(pid=55, comm="leaky"))
    feed_all(e, recs)
    alerts = e.tick(s.t + 1)
    # one finding per process (issue 34 item 1: the per-process count was a second alert,
    # condition close-wait-process, beside one per socket): over 50 sockets it is a warning
    assert [(a.condition, a.severity, a.pid, a.comm, a.metric, a.members) for a in alerts] == [
        ("close-wait", "warning", 55, "leaky", 51.0, 51)
    ]


def test_it_notices_fin_wait_2_beyond_120_seconds():
    s, e = Stream(), engine()
    f = s.flow()
    feed_all(e, [s.state(f, "ESTABLISHED", "FIN_WAIT_1"), s.state(f, "FIN_WAIT_1", "FIN_WAIT_2")])
    e.tick(s.t)
    assert e.tick(s.t + 115) == []
    alerts = e.tick(s.t + 125)
    assert [(a.condition, a.severity, a.conn_uuid) for a in alerts] == [("fin-wait-2", "notice", f.uuid)]


def test_it_warns_when_time_wait_sockets_toward_one_destination_near_the_port_range():
    s, e = Stream(), engine(K10={"ephemeral_ports": 100})
    recs = []
    for _ in range(51):
        s.advance(0.1)
        recs.append(s.state(s.flow(dst="10.0.0.5", dport=80), "FIN_WAIT_2", "TIME_WAIT"))
    alerts = only(feed_all(e, recs), "K10", "time-wait")
    assert [(a.severity, a.dst, a.dport, a.metric) for a in alerts] == [("warning", "10.0.0.5", 80, 51.0)]


def test_it_reads_the_ephemeral_port_range_when_configured_as_zero(tmp_path):
    from analysis.alerts.rules.states import ephemeral_range_size

    sysctl = tmp_path / "ip_local_port_range"
    sysctl.write_text("40000\t40399\n")
    assert ephemeral_range_size(sysctl) == 400
    assert ephemeral_range_size(tmp_path / "missing") == 28232  # Linux's default range
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low, high = map(int, f.read().split())
    s, e = Stream(), engine()  # the default: ephemeral_ports = 0, read from this namespace
    recs = [s.state(s.flow(dst="10.0.0.5", dport=80), "FIN_WAIT_2", "TIME_WAIT")]
    e.feed(recs[0])
    [rule] = [r for r in e.rules if r.rule_id == "K10"]
    assert rule.thresholds["ephemeral_ports"] == high - low + 1


def close_wait_every(s: Stream, recs: list, pid: int, comm: str, n: int) -> None:
    for _ in range(n):
        recs += close_wait(s, s.flow(pid=pid, comm=comm))


def test_it_warns_when_a_process_close_wait_count_grows_for_the_whole_window():
    s, e = Stream(), engine(K10={"sweep_s": 1, "close_wait_growth_s": 5})
    alerts, first = [], None
    for second in range(9):
        recs: list = []
        close_wait_every(s, recs, 77, "leaky", 1)  # one more leaked socket every second
        first = first or recs
        if second < 3:
            close_wait_every(s, recs, 88, "steady", 1)  # three, then no more: a plateau
        alerts += feed_all(e, recs, tick_every=None) + e.tick(s.t)
        s.advance(1.0)
    grown = only(alerts, "K10", "close-wait-growth")
    assert [(a.severity, a.pid, a.comm, a.status, a.count) for a in grown] == [("warning", 77, "leaky", "open", 1)]
    a = grown[0]
    # first judged at the sweep 5 s after the first settled sample (1 socket at t0+1): 6 held by then
    assert (a.metric, a.thresholds["close_wait_growth_s"], a.start) == (6.0, 5, first[1].ts_wall + 6)
    assert a.evidence[0] == first[1].seq and len(a.evidence) == 6
    assert "holds 6 sockets in CLOSE_WAIT, up from 1 5 s ago" in a.message


def test_a_close_wait_count_that_dips_is_not_growth():
    s, e = Stream(), engine(K10={"sweep_s": 1, "close_wait_growth_s": 4})
    flows = [s.flow(pid=90, comm="busy") for _ in range(7)]
    alerts: list = []
    for k, f in enumerate(flows):
        recs = close_wait(s, f)
        if k == 3:  # the app closed two: the settled count fell from 2 to 1
            recs += [s.state(flows[0], "CLOSE_WAIT", "LAST_ACK"), s.state(flows[1], "CLOSE_WAIT", "LAST_ACK")]
        alerts += feed_all(e, recs, tick_every=None) + e.tick(s.t)
        s.advance(1.0)
    assert only(alerts, "K10", "close-wait-growth") == []
    alerts = e.tick(s.t)  # four sweeps after the dip, rising all along: growth again (1 -> 5)
    assert [a.metric for a in only(alerts, "K10", "close-wait-growth")] == [5.0]

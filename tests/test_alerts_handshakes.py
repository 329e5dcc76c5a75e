"""K9 scans and SYN floods, K14 connect failures, on live-record and capture streams."""

from __future__ import annotations

from tests.alert_streams import Flow, Stream, engine, feed_all, only

SYN, SYNACK, ACK = 0x02, 0x12, 0x10


def refused_connect(s: Stream, f: Flow):
    recs = [s.state(f, "CLOSED", "SYN_SENT")]
    s.advance(0.001)
    recs += [s.reset(f, "peer", "SYN_SENT"), s.state(f, "SYN_SENT", "CLOSED")]
    return recs


def ok_connect(s: Stream, f: Flow):
    recs = [s.state(f, "CLOSED", "SYN_SENT")]
    s.advance(0.001)
    return recs + [s.state(f, "SYN_SENT", "ESTABLISHED")]


def test_it_flags_a_port_scan_when_one_source_fails_on_15_ports_of_a_host():
    s, e = Stream(), engine()
    recs = []
    for port in range(1000, 1015):
        s.advance(2.0)
        recs += refused_connect(s, s.flow(src="10.0.0.1", dst="10.0.0.2", dport=port))
    alerts = only(feed_all(e, recs), "K9", "port-scan")
    assert len(alerts) == 1
    a = alerts[0]
    assert (a.severity, a.src, a.dst, a.dport, a.proto, a.metric) == (
        "warning",
        "10.0.0.1",
        "10.0.0.2",
        None,
        "tcp",
        15.0,
    )
    assert a.evidence == [recs[-1].seq]
    assert "15 distinct ports of 10.0.0.2" in a.message


def test_it_sees_a_port_scan_against_this_host_through_its_reply_resets():
    s, e = Stream(), engine()
    recs = []
    for port in range(20, 35):
        s.advance(0.1)
        f = Flow("10.0.0.2", port, "192.0.2.66", 61000, 0, None, None)
        recs.append(s.reset(f, "local", None, flow_overrides={"conn_uuid": None, "sock_cookie": None}))
    alerts = only(feed_all(e, recs), "K9", "port-scan")
    assert [(a.src, a.dst, a.metric) for a in alerts] == [("192.0.2.66", "10.0.0.2", 15.0)]


def test_it_does_not_call_14_failed_ports_a_scan():
    s, e = Stream(), engine()
    recs = []
    for port in range(1000, 1014):
        recs += refused_connect(s, s.flow(dst="10.0.0.2", dport=port))
    assert only(feed_all(e, recs), "K9") == []


def test_it_flags_an_address_scan_over_25_hosts_on_one_port_from_capture_summaries():
    s, e = Stream(), engine()
    recs = []
    for i in range(25):
        s.advance(1.0)
        recs.append(s.connection("198.51.100.9", 40000 + i, f"10.1.0.{i}", 22, "S0" if i % 2 else "REJ"))
    alerts = only(feed_all(e, recs), "K9", "addr-scan")
    assert [(a.src, a.dst, a.dport, a.metric) for a in alerts] == [("198.51.100.9", None, 22, 25.0)]


def test_it_ignores_wide_fan_out_that_succeeds():
    s, e = Stream(), engine()
    recs = []
    for i in range(60):
        recs += ok_connect(s, s.flow(dst=f"10.2.0.{i}", dport=443))
        recs.append(s.connection("10.0.0.1", 40000 + i, f"10.3.0.{i}", 443, "SF", bytes_orig=100, bytes_resp=900))
    assert only(feed_all(e, recs), "K9") == []


def test_it_flags_a_syn_flood_over_256_syns_per_second_for_5_seconds_with_few_handshakes():
    s, e = Stream(), engine()
    recs = []
    for sec in range(7):
        for i in range(300):
            s.t = 1_700_000_000.0 + sec + i / 300
            recs.append(s.segment(f"203.0.113.{i % 250}", 1024 + i, "10.0.0.2", 80, SYN))
    alerts = only(feed_all(e, recs), "K9", "syn-flood")
    assert len(alerts) == 1
    a = alerts[0]
    assert (a.severity, a.dst, a.dport, a.metric) == ("critical", "10.0.0.2", 80, 300.0)
    assert a.ts_wall == 1_700_000_005.0  # the first moment 5 whole seconds were over the rate
    # the attacker side of the same capture: no single source sent > 256 SYNs a minute
    assert only(feed_all(e, []), "K9", "syn-scan") == []


def test_it_does_not_call_a_busy_listener_with_completed_handshakes_a_flood():
    s, e = Stream(), engine()
    recs = []
    for sec in range(7):
        for i in range(300):
            s.t = 1_700_000_000.0 + sec + i / 300
            recs.append(s.segment("203.0.113.1", 1024 + i, "10.0.0.2", 80, SYN))
            recs.append(s.segment("203.0.113.1", 1024 + i, "10.0.0.2", 80, ACK, direction="orig", rel_seq=1, rel_ack=1))
    assert only(feed_all(e, recs), "K9", "syn-flood") == []


def test_it_flags_a_syn_scan_when_this_host_sends_over_256_syns_a_minute_mostly_unanswered():
    s, e = Stream(), engine()
    recs = []
    for i in range(257):
        s.advance(0.1)
        recs.append(s.state(s.flow(src="10.0.0.1", dst=f"10.9.{i // 200}.{i % 200}", dport=445), "CLOSED", "SYN_SENT"))
    alerts = only(feed_all(e, recs), "K9", "syn-scan")
    assert [(a.severity, a.src, a.metric) for a in alerts] == [("warning", "10.0.0.1", 257.0)]


def test_it_warns_when_over_5_percent_of_connects_to_a_service_fail_and_splits_the_causes():
    s, e = Stream(), engine()
    recs = []
    for i in range(20):
        f = s.flow(dst="10.0.0.5", dport=8080)
        s.advance(1.0)
        if i == 4:
            recs += refused_connect(s, f)
        elif i == 9:
            recs.append(s.state(f, "CLOSED", "SYN_SENT"))
            s.advance(0.5)
            recs.append(s.state(f, "SYN_SENT", "CLOSED"))  # gave up without an answer
        else:
            recs += ok_connect(s, f)
    alerts = only(feed_all(e, recs), "K14")
    assert len(alerts) == 1
    a = alerts[0]
    assert (a.condition, a.severity, a.dst, a.dport, a.metric) == ("connect-failures", "warning", "10.0.0.5", 8080, 0.1)
    failed = [r.seq for r in recs if r.kind == "tcp_state" and (r.prev_state, r.state) == ("SYN_SENT", "CLOSED")]
    assert a.evidence == failed and len(failed) == 2
    assert "2 of 20 connection attempts" in a.message and "1 refused by RST, 1 timed out" in a.message


def test_it_raises_k14_to_critical_when_most_connects_are_refused():
    s, e = Stream(), engine()
    recs = []
    for i in range(20):
        s.advance(1.0)
        f = s.flow(dst="10.0.0.5", dport=8080)
        recs += refused_connect(s, f) if i % 4 else ok_connect(s, f)
    alerts = only(feed_all(e, recs), "K14")
    assert alerts[-1].severity == "critical"
    assert alerts[-1].metric == 15 / 20
    assert len({a.alert_id for a in alerts}) == 1


def test_it_reads_connect_failures_from_capture_connection_summaries():
    s, e = Stream(), engine()
    recs = []
    for i in range(20):
        s.advance(1.0)
        state = "REJ" if i < 3 else "SF"
        recs.append(s.connection("10.0.0.1", 40000 + i, "10.0.0.5", 25, state, bytes_orig=10, bytes_resp=10))
    alerts = only(feed_all(e, recs), "K14")
    assert [(a.severity, a.metric) for a in alerts] == [("warning", 3 / 20)]


def test_it_does_not_judge_k14_before_20_attempts():
    s, e = Stream(), engine()
    recs = []
    for _ in range(19):
        recs += refused_connect(s, s.flow(dst="10.0.0.5", dport=8080))
    assert only(feed_all(e, recs), "K14") == []


def test_resets_to_stragglers_of_connections_this_host_closed_are_not_scan_failures():
    # a client gives up in SYN_SENT; the listener's SYN-ACK retry then reaches its closed
    # port: the kernel answers with RST (and drops it as NO_SOCKET) from an ephemeral port
    s, e = Stream(), engine()
    recs = []
    for port in range(1000, 1014):  # 14 real failures: one short of a scan
        recs += refused_connect(s, s.flow(src="10.0.0.1", dst="10.0.0.2", dport=port))
    for k in range(3):
        f = s.flow(src="10.0.0.2", sport=41000 + k, dst="10.0.0.1", dport=7400)
        recs += [s.state(f, "CLOSED", "SYN_SENT"), s.state(f, "SYN_SENT", "CLOSED")]
        s.advance(1.0)
        late = Flow("10.0.0.2", 41000 + k, "10.0.0.1", 7400, 0, None, None)
        recs.append(s.reset(late, "local", None, flow_overrides={"conn_uuid": None, "sock_cookie": None}))
        recs.append(s.drop("NO_SOCKET", "10.0.0.1", 7400, "10.0.0.2", 41000 + k))
    alerts = only(feed_all(e, recs), "K9", "port-scan")
    assert alerts == []  # the 10.0.0.2 client's own failures on 7400 are 1 port, not 3 more
    s.advance(1.0)
    stranger = Flow("10.0.0.2", 41999, "10.0.0.1", 7400, 0, None, None)  # no connection of ours used it
    recs = [s.reset(stranger, "local", None, flow_overrides={"conn_uuid": None, "sock_cookie": None})]
    recs += refused_connect(s, s.flow(src="10.0.0.1", dst="10.0.0.2", dport=1014))
    assert [a.metric for a in only(feed_all(e, recs), "K9", "port-scan")] == [15.0]


def test_a_listeners_resets_name_no_originator_and_make_no_scan():
    # seen on loopback: late ACKs reaching a listener draw RSTs whose record carries the
    # listener's own tuple (peer 0.0.0.0:0)
    s, e = Stream(), engine()
    recs = []
    for port in range(7000, 7020):
        listener = Flow("127.0.0.1", port, "0.0.0.0", 0, 0, None, None)
        recs.append(s.reset(listener, "local", "LISTEN", reason="TCP_FLAGS"))
    assert only(feed_all(e, recs), "K9") == []

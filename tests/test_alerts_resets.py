"""K3 reset storms (volume and peer share) with who sent them, on record streams."""

from __future__ import annotations

from tests.alert_streams import Flow, Stream, engine, feed_all, only


def closed_port_resets(s: Stream, n: int, dt: float = 1.0):
    """The kernel answers n SYNs to local port 9 with RSTs (no socket, no owner)."""
    recs = []
    for i in range(n):
        s.advance(dt)
        f = Flow("10.0.0.2", 9, "10.0.0.7", 50000 + i, 0, None, None)
        recs.append(s.reset(f, "local", None, flow_overrides={"conn_uuid": None, "sock_cookie": None}))
    return recs


def test_it_warns_when_a_closed_port_makes_the_kernel_send_over_10_resets_a_minute():
    s, e = Stream(), engine()
    recs = closed_port_resets(s, 11)
    alerts = only(feed_all(e, recs), "K3")
    assert len(alerts) == 1
    a = alerts[0]
    assert (a.condition, a.severity, a.count, a.metric) == ("volume", "warning", 1, 11.0)
    assert (a.src, a.sport, a.dst, a.dport, a.pid, a.conn_uuid) == ("10.0.0.2", 9, None, None, None, None)
    assert a.evidence == [r.seq for r in recs]
    assert "the kernel on local 10.0.0.2:9" in a.message
    assert "11 replies to segments for a closed port (no listener)" in a.message


def test_it_names_the_process_that_aborts_connections_with_resets():
    s, e = Stream(), engine()
    recs = []
    for _ in range(12):
        f = s.flow(pid=777, comm="proxy")
        s.advance(0.5)
        recs.append(s.state(f, "SYN_RECEIVED", "ESTABLISHED"))  # teaches the owner of the socket
        recs.append(s.reset(f, "local", "ESTABLISHED", active=True))
    alerts = only(feed_all(e, recs), "K3", "volume")
    assert [(a.severity, a.pid, a.comm, a.metric) for a in alerts] == [("warning", 777, "proxy", 11.0)]
    assert "proxy (pid 777)" in alerts[0].message
    assert "11 active resets" in alerts[0].message


def test_it_stays_quiet_at_10_resets_a_minute():
    s, e = Stream(), engine()
    quiet = closed_port_resets(s, 30, dt=6.5)  # never more than 10 within any 60 s
    assert only(feed_all(e, quiet), "K3") == []


def test_it_warns_when_peers_refuse_over_5_percent_of_new_connections_to_a_service():
    s, e = Stream(), engine()
    recs = []
    refused = []
    for i in range(20):
        f = s.flow(dst="10.0.0.5", dport=5432)
        s.advance(1.0)
        recs.append(s.state(f, "CLOSED", "SYN_SENT"))
        if i in (7, 15):
            r = s.reset(f, "peer", "SYN_SENT")
            recs += [r, s.state(f, "SYN_SENT", "CLOSED")]
            refused.append(r.seq)
        else:
            recs.append(s.state(f, "SYN_SENT", "ESTABLISHED"))
    alerts = only(feed_all(e, recs), "K3", "peer-share")
    assert len(alerts) == 1
    a = alerts[0]
    assert (a.severity, a.src, a.dst, a.dport, a.metric) == ("warning", None, "10.0.0.5", 5432, 2 / 20)
    assert a.evidence == refused
    assert "reset 2 of 20 new connections (10%)" in a.message and "2 refused during the handshake" in a.message


def test_it_accepts_one_peer_reset_in_twenty_connections():
    s, e = Stream(), engine()
    recs = []
    for i in range(20):
        f = s.flow(dst="10.0.0.5", dport=5432)
        s.advance(1.0)
        recs.append(s.state(f, "CLOSED", "SYN_SENT"))
        recs.append(s.state(f, "SYN_SENT", "ESTABLISHED"))
        if i == 3:
            recs.append(s.reset(f, "peer", "ESTABLISHED"))
    assert only(feed_all(e, recs), "K3") == []


def idle_then_reset(s: Stream, silence: float, answered: bool = False, resume: bool = True):
    f = s.flow(dst="10.0.0.9", dport=5432, pid=61, comm="pooler")
    recs = [s.state(f, "SYN_SENT", "ESTABLISHED")]
    s.advance(0.01)
    recs += [s.siftr(f, "out", data_sz=100), s.siftr(f, "in", data_sz=300)]
    s.advance(silence)
    if resume:
        recs.append(s.siftr(f, "out", data_sz=100))  # the first query after the silence
        if answered:
            recs.append(s.siftr(f, "in", data_sz=50))
        s.advance(0.001)
    recs.append(s.reset(f, "peer", "ESTABLISHED"))
    return f, recs


def test_it_classifies_a_reset_answering_the_first_data_after_a_long_silence_as_a_middlebox_idle_timeout():
    s, e = Stream(), engine()
    f, recs = idle_then_reset(s, 300.0)
    [a] = only(feed_all(e, recs), "K3", "idle-reset")
    assert (a.severity, a.conn_uuid, a.comm, a.dst, a.dport, a.metric) == (
        "notice",
        f.uuid,
        "pooler",
        "10.0.0.9",
        5432,
        300.0,
    )
    assert a.evidence == [recs[2].seq, recs[-1].seq]  # the last data before the silence, the RST
    assert (a.thresholds["idle_reset_s"], a.count) == (240, 1)
    assert "after 300.0 s without any data (and it answered the first data sent after that silence)" in a.message
    assert "likely a middlebox" in a.message


def test_it_classifies_a_reset_that_ends_a_silence_itself():
    s, e = Stream(), engine()
    _, recs = idle_then_reset(s, 250.0, resume=False)
    [a] = only(feed_all(e, recs), "K3", "idle-reset")
    assert a.metric == 250.0 and "and nothing was sent since" in a.message


def test_a_reset_after_a_short_silence_or_an_answered_one_is_not_an_idle_timeout():
    for silence, answered in ((200.0, False), (300.0, True)):
        s, e = Stream(), engine()
        _, recs = idle_then_reset(s, silence, answered=answered)
        assert only(feed_all(e, recs), "K3") == []


def polled_idle_then_reset(s: Stream, silence: float, answered: bool):
    """idle_then_reset seen by siftr-poll: samples only when snd_una / snd_nxt moved."""
    f = s.flow(dst="10.0.0.9", dport=5432, pid=61, comm="pooler")
    recs = [s.state(f, "SYN_SENT", "ESTABLISHED")]
    s.advance(0.1)
    recs.append(s.siftr(f, "poll", snd_una=1, snd_nxt=1))
    s.advance(0.1)
    recs.append(s.siftr(f, "poll", snd_una=101, snd_nxt=101, rcv_buf_cc=300))  # a query answered
    s.advance(silence)  # no poll sample: nothing moved
    recs.append(s.siftr(f, "poll", snd_una=101, snd_nxt=201))  # the first query after the silence
    if answered:
        s.advance(0.1)
        recs.append(s.siftr(f, "poll", snd_una=201, snd_nxt=201))
    s.advance(0.05)
    recs.append(s.reset(f, "peer", "ESTABLISHED"))
    return recs


def test_polled_samples_tell_the_silence_and_the_unanswered_query_before_an_idle_reset():
    s, e = Stream(), engine()
    recs = polled_idle_then_reset(s, 300.0, answered=False)
    [a] = only(feed_all(e, recs), "K3", "idle-reset")
    assert a.evidence == [recs[2].seq, recs[-1].seq] and 300.0 <= a.metric < 300.2
    assert "and it answered the first data sent after that silence" in a.message
    s, e = Stream(), engine()
    assert only(feed_all(e, polled_idle_then_reset(s, 300.0, answered=True)), "K3") == []


def test_the_peer_share_alert_counts_the_resets_that_came_after_a_long_silence():
    s, e = Stream(), engine(K3={"idle_reset_s": 60})
    recs = []
    for k in range(20):
        f = s.flow(dst="10.0.0.9", dport=5432, pid=61, comm="pooler")
        recs += [s.state(f, "CLOSED", "SYN_SENT"), s.state(f, "SYN_SENT", "ESTABLISHED")]
        recs += [s.siftr(f, "out", data_sz=100), s.siftr(f, "in", data_sz=300)]
        if k < 2:  # two of the twenty are reset by a middlebox that forgot them
            s.advance(90.0)
            recs += [s.siftr(f, "out", data_sz=100), s.reset(f, "peer", "ESTABLISHED")]
        s.advance(1.0)
    alerts = feed_all(e, recs)
    [a] = only(alerts, "K3", "peer-share")
    assert "2 aborted later (2 after a long silence: likely a middlebox idle timeout)" in a.message
    assert [x.metric for x in only(alerts, "K3", "idle-reset")] == [90.0, 90.0]

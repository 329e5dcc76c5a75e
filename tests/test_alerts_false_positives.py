"""No alert at all on healthy traffic: a bulk transfer, 200 short request/response
connections, an idle keep-alive connection (issue 8's false-positive streams).

These are record streams shaped like what the collector emits for such traffic on a
traced loopback host (both ends traced); tests/test_alerts_kernel.py repeats them on
real kernel records when `nettrail collect` is available.
"""

from __future__ import annotations

from tests.alert_streams import Flow, Stream, engine, feed_all

MSS = 1448


def handshake(s: Stream, client: Flow, server: Flow):
    recs = [s.state(client, "CLOSED", "SYN_SENT")]
    s.advance(0.0001)
    recs.append(s.state(client, "SYN_SENT", "ESTABLISHED"))
    recs.append(s.state(server, "SYN_RECEIVED", "ESTABLISHED"))
    return recs


def teardown(s: Stream, client: Flow, server: Flow):
    recs = [s.state(client, "ESTABLISHED", "FIN_WAIT_1"), s.state(server, "ESTABLISHED", "CLOSE_WAIT")]
    s.advance(0.0001)
    recs += [s.state(client, "FIN_WAIT_1", "FIN_WAIT_2"), s.state(server, "CLOSE_WAIT", "LAST_ACK")]
    s.advance(0.0001)
    recs += [s.state(client, "FIN_WAIT_2", "TIME_WAIT"), s.state(server, "LAST_ACK", "CLOSED")]
    return recs


def pair(s: Stream, dport: int = 5201):
    client = s.flow(src="127.0.0.1", dst="127.0.0.1", dport=dport, pid=100, comm="client")
    server = Flow("127.0.0.1", dport, "127.0.0.1", client.sport, client.cookie + 100000, 200, "server")
    return client, server


def bulk_transfer(s: Stream, seconds: float = 20.0):
    client, server = pair(s)
    recs = handshake(s, client, server)
    nxt, cwnd, sent = 0, 10, 0
    t_end = s.t + seconds
    i = 0
    while s.t < t_end:
        i += 1
        s.advance(0.002)
        nxt += 10 * MSS
        sent += 10
        cwnd = min(cwnd + 1, 600)
        srtt = 60 + (i * 13) % 90  # 60-150 us of loopback jitter
        recs.append(s.siftr(client, "in", snd_nxt=nxt, snd_una=nxt - 5 * MSS, snd_cwnd=cwnd * MSS, mss=MSS,
                            srtt=srtt, snd_wnd=3_000_000, rcv_wnd=65_000))  # fmt: skip
        recs.append(s.siftr(server, "in", snd_nxt=1, snd_una=1, snd_cwnd=10 * MSS, mss=MSS, srtt=40,
                            snd_wnd=65_000, rcv_wnd=3_000_000 - (i % 7) * 100_000))  # fmt: skip
        if i % 500 == 0:
            recs.append(s.counters(client, packets_out=sent, bytes_out=nxt))
    return recs + teardown(s, client, server)


def request_response(s: Stream, n: int = 200):
    recs = []
    for k in range(n):
        s.advance(0.1)
        client, server = pair(s, dport=8080)
        recs += handshake(s, client, server)
        s.advance(0.0002)
        recs.append(s.siftr(server, "in", snd_nxt=1, snd_una=1, snd_cwnd=10 * MSS, mss=MSS, srtt=50 + k % 30,
                            snd_wnd=65_000, rcv_wnd=65_000))  # fmt: skip
        recs.append(s.siftr(client, "in", snd_nxt=300, snd_una=300, snd_cwnd=10 * MSS, mss=MSS, srtt=55,
                            snd_wnd=65_000, rcv_wnd=65_000))  # fmt: skip
        recs += teardown(s, client, server)
    return recs


def idle_keepalive(s: Stream, minutes: int = 10):
    client, server = pair(s, dport=6379)
    recs = handshake(s, client, server)
    for _ in range(int(minutes * 60 / 75)):  # a keep-alive probe and its ACK every 75 s
        s.advance(75)
        recs.append(s.siftr(server, "in", snd_nxt=900, snd_una=900, snd_cwnd=10 * MSS, mss=MSS, srtt=70,
                            snd_wnd=65_000, rcv_wnd=65_000))  # fmt: skip
        recs.append(s.siftr(client, "in", snd_nxt=500, snd_una=500, snd_cwnd=10 * MSS, mss=MSS, srtt=65,
                            snd_wnd=65_000, rcv_wnd=65_000))  # fmt: skip
    return recs


def run_clean(recs, s: Stream):
    e = engine()
    alerts = feed_all(e, recs)
    alerts += e.tick(s.t + 1) + e.tick(s.t + 200) + e.finish()
    return alerts


def test_a_clean_bulk_transfer_raises_no_alert():
    s = Stream()
    assert run_clean(bulk_transfer(s), s) == []


def test_200_short_request_response_connections_raise_no_alert():
    s = Stream()
    assert run_clean(request_response(s), s) == []


def test_an_idle_keep_alive_connection_raises_no_alert():
    s = Stream()
    assert run_clean(idle_keepalive(s), s) == []

"""Issue 34 item 1 for K6 and K7: 20 connections to one destination whose cwnd collapses, or
whose srtt spikes, together, are one finding for the destination with 20 members."""

from __future__ import annotations

from tests.alert_streams import Stream, engine, feed_all, only

N = 20


def test_20_connections_spiking_toward_one_destination_are_one_k7_finding_with_20_members():
    s, e = Stream(), engine()
    flows = [s.flow(dst=f"10.0.0.{10 + i}", dport=443) for i in range(N)]
    recs = []
    for _ in range(16):  # the destination's baseline: 2 ms
        s.advance(0.1)
        recs += [s.siftr(f, srtt=2_000) for f in flows[:1]]
    for _ in range(8):  # every connection at 30 ms, 0.1 s apart
        s.advance(0.1)
        recs += [s.siftr(f, srtt=30_000) for f in flows]
    out = feed_all(e, recs) + e.finish()
    k7 = only(out, "K7")
    assert len({a.alert_id for a in k7}) == 1
    a = k7[-1]
    assert (a.members, a.dport, a.dst, a.conn_uuid, a.severity) == (N, 443, None, None, "warning")
    assert sorted(a.member_conn_uuids) == sorted(f.uuid for f in flows)
    assert a.message.startswith(f"The smoothed RTT of {N} connections rose over the limit of 7.00 ms against the ")
    assert "of connections to 10.0.0.0/24 port 443, the latest (an unattributed socket toward " in a.message
    assert f"; {N - 1} other connections to it spike too: queueing on the path" in a.message


def test_20_connections_whose_cwnd_collapses_toward_one_destination_are_one_k6_finding_with_20_members():
    s, e = Stream(), engine()
    flows = [s.flow(dst="10.0.0.5", dport=443) for _ in range(N)]
    recs = []
    for _ in range(20):  # 100 segments of cwnd in flight
        s.advance(0.05)
        recs += [s.siftr(f, snd_cwnd=100_000, mss=1000, snd_nxt=5000, snd_una=1000) for f in flows]
    for _ in range(6):  # an RTO on every one: 1 segment, still outstanding, for 1.25 s
        s.advance(0.25)
        recs += [s.siftr(f, snd_cwnd=1000, mss=1000, snd_nxt=5000, snd_una=1000) for f in flows]
    out = feed_all(e, recs) + e.finish()
    k6 = only(out, "K6")
    assert len({a.alert_id for a in k6}) == 1
    a = k6[-1]
    assert (a.members, a.dst, a.dport, a.conn_uuid, a.metric) == (N, "10.0.0.5", 443, None, 1.0)
    assert a.member_conn_uuids == [f.uuid for f in flows]
    assert a.message == (
        f"The congestion windows of {N} connections on this host toward 10.0.0.5:443 collapsed with data "
        "outstanding, the latest to 1 segment from a peak of 100 for 1.2 s: retransmission timeouts or severe loss "
        "on the path, and throughput drops to a trickle."
    )

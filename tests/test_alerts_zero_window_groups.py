"""Issue 34 item 1 for zero windows and K5 drops: N sockets held at zero by one reader are one finding
with N members (K5 per local process, K13 per peer), re-measured while they are held."""

from __future__ import annotations

from tests.alert_streams import Flow, Stream, engine, feed_all, only
from translators.records import Record

N = 30


def stalled(s: Stream, flows: list[Flow], field: str, samples: int = 6) -> list[Record]:
    """Every flow samples a zero ``field`` window each 0.25 s (1.25 s in all)."""
    recs: list[Record] = [s.state(f, "SYN_RECEIVED", "ESTABLISHED") for f in flows]
    for _ in range(samples):
        for f in flows:
            recs.append(s.siftr(f, **{field: 0, ("snd_wnd" if field == "rcv_wnd" else "rcv_wnd"): 65535}))
        s.advance(0.25)
    return recs


def newest(alerts: list) -> dict:
    out = {}
    for a in alerts:
        out[a.alert_id] = a
    return out


def test_30_sockets_one_process_does_not_read_are_one_k5_finding_with_30_members():
    s, e = Stream(), engine()
    flows = [s.flow(src="10.0.0.2", sport=7000, dst="10.0.0.9", dport=41000 + i, pid=99, comm="slowreader")
             for i in range(N)]  # fmt: skip
    out = feed_all(e, stalled(s, flows, "rcv_wnd")) + e.tick(s.t)
    k5 = newest(only(out, "K5", "zero-window"))
    assert len(k5) == 1
    (a,) = k5.values()
    assert (a.members, a.severity, a.pid, a.tgid, a.comm, a.src, a.sport, a.dst, a.conn_uuid) == (
        N, "warning", 99, 99, "slowreader", "10.0.0.2", 7000, None, None,
    )  # fmt: skip
    assert a.member_conn_uuids == [f.uuid for f in flows]
    assert a.message == (
        f"This host has advertised a zero receive window on {N} connections of slowreader (pid 99) for more than "
        f"1 s, the longest 1.0 s (on 10.0.0.2:7000 <- 10.0.0.9:41000): slowreader (pid 99) is not reading, so "
        "their senders are stalled."
    )


def test_30_sockets_one_peer_does_not_read_are_one_k13_finding_with_30_members():
    s, e = Stream(), engine()
    flows = [s.flow(dst="10.0.0.5", dport=9000) for _ in range(N)]
    out = feed_all(e, stalled(s, flows, "snd_wnd")) + e.tick(s.t)
    k13 = newest(only(out, "K13"))
    assert len(k13) == 1
    (a,) = k13.values()
    assert (a.members, a.dst, a.dport, a.comm, a.sport, a.conn_uuid) == (N, "10.0.0.5", 9000, "client", None, None)
    assert a.member_conn_uuids == [f.uuid for f in flows]
    assert a.message == (
        f"The peer 10.0.0.5:9000 has advertised a zero window to {N} connections of client (pid 4242) for more "
        "than 1 s, the longest 1.0 s: the remote application is not reading, so this host cannot send and their "
        "data waits in the send buffers."
    )
    assert only(out, "K5") == []


def test_two_peers_are_two_findings_and_one_socket_stays_that_sockets_finding():
    s, e = Stream(), engine()
    flows = [s.flow(dst="10.0.0.5", dport=9000), s.flow(dst="10.0.0.5", dport=9000), s.flow(dst="10.0.0.6")]
    out = feed_all(e, stalled(s, flows, "snd_wnd")) + e.tick(s.t)
    k13 = sorted(newest(only(out, "K13")).values(), key=lambda a: a.dst)
    assert [(a.dst, a.members) for a in k13] == [("10.0.0.5", 2), ("10.0.0.6", 1)]
    assert (k13[1].conn_uuid, k13[1].sport) == (flows[2].uuid, flows[2].sport)
    assert k13[1].message.startswith("The peer 10.0.0.6:80 has advertised a zero window to client (pid 4242) for ")


def test_tcp_zerowindow_drops_on_30_connections_of_one_reader_are_one_k5_finding():
    s, e = Stream(), engine()
    flows = [s.flow(src="10.0.0.2", sport=7000, dst="10.0.0.9", dport=42000 + i, pid=99, comm="slowreader")
             for i in range(N)]  # fmt: skip
    recs: list[Record] = [s.state(f, "SYN_RECEIVED", "ESTABLISHED") for f in flows]
    for f in flows:  # the peer's segment, dropped at this socket: sender first
        recs.append(s.drop("TCP_ZEROWINDOW", f.dst, f.dport, f.src, f.sport, conn_uuid=f.uuid, sock_cookie=f.cookie))
        s.advance(0.01)
    out = feed_all(e, recs) + e.finish()
    k5 = newest(only(out, "K5", "tcp-zerowindow"))
    assert len(k5) == 1
    (a,) = k5.values()
    assert (a.members, a.metric, a.pid, a.comm, a.conn_uuid, a.src, a.dst) == (
        N, float(N), 99, "slowreader", None, None, None,
    )  # fmt: skip
    assert a.member_conn_uuids == [f.uuid for f in flows]
    assert a.message == (
        f"{N} TCP_ZEROWINDOW drops in 10 s on {N} connections of slowreader (pid 99): data already sent was thrown "
        "away because the receiving application does not read fast enough."
    )

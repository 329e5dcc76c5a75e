"""Issue 34 item 1 for K10 FIN_WAIT_2: N sockets a peer never sends its FIN on are one
finding per peer with N members, re-measured at each sweep and released once they close."""

from __future__ import annotations

from tests.alert_streams import Stream, engine, feed_all, only
from translators.records import Record

N = 40


def half_closed(s: Stream, n: int, dst: str = "10.0.0.5", dport: int = 80) -> tuple[list[Record], list]:
    recs, flows = [], []
    for _ in range(n):
        f = s.flow(dst=dst, dport=dport)
        flows.append(f)
        recs += [s.state(f, "ESTABLISHED", "FIN_WAIT_1"), s.state(f, "FIN_WAIT_1", "FIN_WAIT_2")]
        s.advance(0.01)
    return recs, flows


def test_40_sockets_one_peer_never_finishes_are_one_finding_with_40_members():
    s, e = Stream(), engine(K10={"fin_wait2_s": 2, "sweep_s": 1})
    recs, flows = half_closed(s, N)
    other, _ = half_closed(s, 1, dst="10.0.0.6")
    t0 = s.t
    out = feed_all(e, recs + other) + e.tick(t0) + e.tick(t0 + 3)
    k10 = {a.alert_id: a for a in only(out, "K10", "fin-wait-2")}
    assert len(k10) == 2
    (a,) = [a for a in k10.values() if a.dst == "10.0.0.5"]
    assert (a.members, a.severity, a.dport, a.comm, a.tgid, a.conn_uuid, a.sport) == (
        N, "notice", 80, "client", 4242, None, None,
    )  # fmt: skip
    assert a.member_conn_uuids == [f.uuid for f in flows]
    assert a.message == (
        f"{N} connections of client (pid 4242) have been in FIN_WAIT_2 toward 10.0.0.5:80 for more than 2 s, the "
        "oldest 3 s: client (pid 4242) closed its side and the peer 10.0.0.5:80 never sent its FIN: a half-closed "
        "connection the peer forgot, or a peer bug."
    )
    (one,) = [a for a in k10.values() if a.dst == "10.0.0.6"]
    assert (one.members, one.conn_uuid is not None) == (1, True)
    assert one.message.startswith("A socket has been in FIN_WAIT_2 for 3 s (limit 2 s): client (pid 4242) closed ")
    # they all finish: the finding is released (closed two sweeps later)
    done = [s.state(f, "FIN_WAIT_2", "TIME_WAIT") for f in flows]
    s.t = t0 + 4
    out = feed_all(e, done) + e.tick(t0 + 4) + e.tick(t0 + 10)
    closed = [x for x in only(out, "K10", "fin-wait-2") if x.alert_id == a.alert_id]
    assert [x.status for x in closed][-1:] == ["closed"]

"""Issue 34: one finding per problem, and its numbers current from the first sight.

Synthetic record streams (tests/alert_streams.py) through the real engine: 200 sockets a
process leaks in CLOSE_WAIT are one K10 alert whose members and text say 200, an aggregate
that grows is re-emitted with its present count within update_interval_s, and a process
is named by its tgid even when a worker thread's records name the thread.
"""

from __future__ import annotations

import msgspec

from tests.alert_streams import Stream, engine, feed_all, only
from translators.records import Alert


def leak(s: Stream, n: int, pid: int | None = 700, comm: str | None = "leaky", dport: int = 8080) -> tuple[list, list]:
    """n server sockets of one listener whose peers closed, left in CLOSE_WAIT."""
    recs, flows = [], []
    for _ in range(n):
        f = s.flow(src="10.0.0.2", sport=dport, dst="10.0.0.9", dport=40000 + s.cookie + 1, pid=pid, comm=comm)
        flows.append(f)
        recs += [s.state(f, "SYN_RECEIVED", "ESTABLISHED"), s.state(f, "ESTABLISHED", "CLOSE_WAIT")]
        s.advance(0.001)
    return recs, flows


def latest(alerts: list[Alert]) -> dict[str, Alert]:
    out: dict[str, Alert] = {}
    for a in alerts:
        out[a.alert_id or ""] = a
    return out


def test_200_close_wait_sockets_of_one_process_are_one_alert_with_200_members():
    s, e = Stream(), engine(K10={"close_wait_s": 2, "sweep_s": 1})
    recs, flows = leak(s, 200)
    out = feed_all(e, recs) + e.tick(s.t + 1) + e.tick(s.t + 3)
    k10 = only(out, "K10")
    assert len(latest(k10)) == 1
    (a,) = k10
    assert (a.condition, a.severity, a.pid, a.tgid, a.comm, a.members, a.count) == (
        "close-wait", "warning", 700, 700, "leaky", 200, 200,
    )  # fmt: skip
    assert a.message.startswith("leaky (pid 700) on 10.0.0.2:8080 holds 200 sockets in CLOSE_WAIT, the oldest for ")
    assert a.member_conn_uuids == [f.uuid for f in flows[:50]]  # the first 50; members counts them all
    # about the process and its listener's port, which every member shares; not one socket
    assert (a.conn_uuid, a.src, a.sport, a.dst, a.dport) == (None, "10.0.0.2", 8080, None, None)


def test_a_growing_leak_is_re_emitted_with_its_present_count_at_most_every_10_seconds():
    s, e = Stream(), engine(K10={"close_wait_s": 2, "sweep_s": 1})
    recs, _ = leak(s, 81)
    out = feed_all(e, recs) + e.tick(s.t + 1) + e.tick(s.t + 3)
    first = only(out, "K10")
    assert [(a.members, a.metric) for a in first] == [(81, 81.0)]
    assert first[0].message.startswith("leaky (pid 700) on 10.0.0.2:8080 holds 81 sockets")
    t0 = first[0].ts_wall
    more, _ = leak(s, 119)
    out = feed_all(e, more)
    for dt in range(4, 16):
        out += e.tick(t0 + dt)
    updates = only(out, "K10")
    # the 200 were in CLOSE_WAIT by t0 + 1: the first sweep 10 s after the first version says so
    assert [(a.alert_id, a.status, a.members, round(a.ts_wall - t0)) for a in updates] == [
        (first[0].alert_id, "open", 200, 10)
    ]
    assert updates[0].message.startswith("leaky (pid 700) on 10.0.0.2:8080 holds 200 sockets")
    assert [(a.members, a.status) for a in e.finish()] == [(200, "open")]  # the end of the stream: still 200


def test_the_finding_clears_once_the_process_closed_every_socket_and_says_how_many_were_left():
    s, e = Stream(), engine(K10={"close_wait_s": 2, "sweep_s": 1})
    recs, flows = leak(s, 3)
    out = feed_all(e, recs) + e.tick(s.t + 1) + e.tick(s.t + 3)
    s.advance(4)
    closes = [s.state(f, "CLOSE_WAIT", "LAST_ACK") for f in flows[:2]]
    out += feed_all(e, closes) + e.tick(s.t + 0.5)
    s.advance(1)
    out += feed_all(e, [s.state(flows[2], "CLOSE_WAIT", "LAST_ACK")])
    out += e.tick(s.t + 1.5) + e.tick(s.t + 2.5)
    k10 = only(out, "K10")
    assert len(latest(k10)) == 1
    assert [(a.status, a.members) for a in k10] == [("open", 3), ("closed", 1)]
    # two left between versions: the closing version states the last count measured (1)


def test_unattributed_sockets_group_by_their_local_endpoint():
    s, e = Stream(), engine(K10={"close_wait_s": 2, "sweep_s": 1})
    a_recs, _ = leak(s, 5, pid=None, comm=None, dport=8080)
    b_recs, _ = leak(s, 3, pid=None, comm=None, dport=9090)
    out = feed_all(e, a_recs + b_recs) + e.tick(s.t + 1) + e.tick(s.t + 3)
    k10 = sorted(only(out, "K10"), key=lambda a: a.sport or 0)
    assert [(a.src, a.sport, a.members) for a in k10] == [("10.0.0.2", 8080, 5), ("10.0.0.2", 9090, 3)]
    assert k10[0].message.startswith("The unattributed sockets of 10.0.0.2:8080 hold 5 sockets")


def test_a_process_is_named_by_its_tgid_not_the_thread_whose_record_came_first():
    s, e = Stream(), engine(K10={"close_wait_s": 2, "sweep_s": 1})
    recs, _ = leak(s, 2, pid=900, comm="server")
    # worker threads: their own thread ids, the second with its own thread name
    recs = [
        msgspec.structs.replace(r, pid=25001 + i, comm="server" if i < 2 else "worker-2") for i, r in enumerate(recs)
    ]
    out = feed_all(e, recs) + e.tick(s.t + 1) + e.tick(s.t + 3)
    (a,) = only(out, "K10")
    assert (a.tgid, a.members) == (900, 2)
    assert a.message.startswith("server (pid 900) on 10.0.0.2:8080 holds 2 sockets")


def test_99_clients_retrying_syns_to_one_overflowing_listener_are_one_k2_finding():
    """Issue 34: an accept-queue overflow made 99 K2 alerts, one per client connection."""
    s, e = Stream(), engine()
    flows = [s.flow(dst="10.0.0.5", dport=7400, pid=800, comm="client") for _ in range(99)]
    recs = []
    for f in flows:
        recs.append(s.state(f, "CLOSED", "SYN_SENT"))
        s.advance(0.01)
        recs.append(s.retrans(f, retrans_kind="syn", state="SYN_SENT"))
    s.advance(1.0)
    recs += [s.retrans(f, retrans_kind="syn", state="SYN_SENT") for f in flows[:3]]  # three retry twice
    out = only(feed_all(e, recs, tick_every=None) + e.finish(), "K2", "syn-retry")
    assert len(latest(out)) == 1
    a = out[-1]
    assert (a.severity, a.dst, a.dport, a.comm, a.tgid, a.members, a.metric) == (
        "notice", "10.0.0.5", 7400, "client", 800, 99, 2.0,
    )  # fmt: skip
    assert a.member_conn_uuids == [f.uuid for f in flows[:50]]
    assert a.message.startswith("99 connections of client (pid 800) resent their SYN to 10.0.0.5:7400, up to 2 times")


def test_k14s_versions_follow_the_failures_from_18_of_20_to_98_of_100():
    """Issue 34: K14 said "18 of 20 failed" and never "98 of 100". Refused connects to one
    service, 5 a second (20 s): versions at most every 10 s, the last one the present."""
    s, e = Stream(), engine()
    recs = []
    for i in range(100):
        s.advance(0.2)
        f = s.flow(dst="10.0.0.5", dport=8080)
        recs += [s.state(f, "CLOSED", "SYN_SENT")]
        s.advance(0.001)
        if i in (0, 1):
            recs.append(s.state(f, "SYN_SENT", "ESTABLISHED"))
        else:
            recs += [s.reset(f, "peer", "SYN_SENT"), s.state(f, "SYN_SENT", "CLOSED")]
    out = only(feed_all(e, recs), "K14")
    assert len(latest(out)) == 1
    assert "18 of 20 connection attempts" in out[0].message
    assert all(b.ts_wall - a.ts_wall >= 10 for a, b in zip(out, out[1:], strict=False) if a.severity == b.severity)
    assert "98 of 100" not in out[-1].message  # the last 6 s of failures came within the interval
    update = only(e.tick(out[-1].ts_wall + 10), "K14")  # the next sweep due: the present state
    assert [(a.alert_id, a.metric) for a in update] == [(out[0].alert_id, 98 / 100)]
    assert "98 of 100 connection attempts" in update[0].message

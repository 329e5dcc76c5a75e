"""K4 per listener (issue 34 item 2): the collector's listen-overflow records name the full
listener, the namespace's counters give the numbers, and K8 names the listener as the cause
of connects that timed out toward it. On real sockets: tests/test_alerts_listen_overflow_kernel.py."""

from __future__ import annotations

from typing import Any

from tests.alert_streams import Stream, engine, feed_all, only
from translators.records import Record, SockEvent, StackCounter

NETNS = 4026532999


def counter(s: Stream, name: str, value: int, delta: int) -> StackCounter:
    env = s._env("linux", "stack-counter", netns=NETNS, hook="/proc/net/netstat", netns_name="web")
    return StackCounter(**env, mib="TcpExt", counter=name, value=value, delta=delta)


def full(s: Stream, queue: int = 5, backlog: int = 4, src: str = "10.9.0.2", **kw: Any) -> SockEvent:
    env = s._env("linux", "listen-overflow", netns=NETNS, hook="sock_diag/inet_diag", pid=700, tgid=700,
                 comm="server", ctx="task")  # fmt: skip
    return SockEvent(**env, ip_ver=4, src=src, sport=8080, proto="tcp", queue=queue, backlog=backlog, **kw)


def read(s: Stream, overflows: tuple[int, int], drops: tuple[int, int], listener: bool = True) -> list[Record]:
    """One read of the namespace as collector/stack_counters.py orders it (one ts_ns)."""
    out: list[Record] = [counter(s, "ListenDrops", drops[0], drops[1])]
    if listener:
        out.append(full(s))
    out.append(counter(s, "ListenOverflows", overflows[0], overflows[1]))
    for r in out:
        r.ts_ns = out[0].ts_ns
    s.advance(1.0)
    return out


def test_a_full_listener_is_one_finding_with_its_queue_backlog_and_its_namespace_counters():
    s, e = Stream(), engine()
    recs = read(s, (5, 5), (5, 5)) + read(s, (12, 7), (13, 8)) + read(s, (14, 2), (15, 2), listener=False)
    alerts = only(feed_all(e, recs) + e.finish(), "K4")
    assert {a.alert_id for a in alerts} == {alerts[0].alert_id}
    a = alerts[-1]
    assert (a.condition, a.severity, a.src, a.sport, a.netns, a.tgid, a.comm, a.metric) == (
        "overflow",
        "warning",
        "10.9.0.2",
        8080,
        NETNS,
        700,
        "server",
        14.0,
    )
    assert a.message.startswith(
        "The listener 10.9.0.2:8080 of server (pid 700) had a full accept queue 1 s ago: 5 connections wait for "
        "accept() and its backlog is 4 (ss -ltn: Recv-Q 5, Send-Q 4), so it drops every new SYN and "
        f"handshake-completing ACK. network namespace {NETNS} (web) counted 14 ListenOverflows and 15 ListenDrops "
        "in the last 10 s (overflow in 3 of them; 14 and 15 since it was created, as nstat -a reads them)."
    )
    assert alerts[0].message.startswith("The listener 10.9.0.2:8080 of server (pid 700) has a full accept queue: ")


def test_k8_names_the_full_listener_of_this_host_as_the_cause_of_connect_timeouts():
    s, e = Stream(), engine()
    f = s.flow(dst="10.9.0.2", dport=8080)
    recs: list[Record] = [s.state(f, "CLOSED", "SYN_SENT")]
    s.advance(0.5)
    recs += read(s, (3, 3), (3, 3))
    s.advance(6.0)
    recs.append(s.state(f, "SYN_SENT", "CLOSED"))
    k8 = [a for a in only(feed_all(e, recs) + e.finish(), "K8") if a.condition == "connect-timeout"]
    assert k8[-1].message.endswith(
        "connect timeouts, the listener 10.9.0.2:8080 of server (pid 700) in network namespace "
        f"{NETNS} on this host has a full accept queue (5 waiting, backlog 4) and drops their SYNs (its K4 finding "
        "has the counts)."
    )


def test_without_a_full_listener_k8_still_blames_the_peer_or_the_path():
    s, e = Stream(), engine()
    f = s.flow(dst="10.9.0.3", dport=8080)
    recs: list[Record] = [s.state(f, "CLOSED", "SYN_SENT")]
    recs += read(s, (3, 3), (3, 3))  # a full listener on 10.9.0.2, not the one connected to
    s.advance(6.0)
    recs.append(s.state(f, "SYN_SENT", "CLOSED"))
    k8 = [a for a in only(feed_all(e, recs) + e.finish(), "K8") if a.condition == "connect-timeout"]
    assert k8[-1].message.endswith("connect timeouts, the peer or the path is dropping SYNs.")


def test_a_listener_on_every_address_is_the_cause_only_for_an_address_of_its_own_namespace():
    """Containers often listen on 0.0.0.0:8080 each: a connect to another namespace's address
    on that port is not blamed on this one."""
    s, e = Stream(), engine()
    mine = s.flow(src="10.9.0.5", dst="10.9.0.1", dport=40000)
    recs: list[Record] = [s.state(mine, "SYN_RECEIVED", "ESTABLISHED")]
    recs[0].netns = NETNS  # 10.9.0.5 is an address of the listener's namespace
    attempts = [s.flow(dst=dst, dport=8080) for dst in ("10.9.0.5", "10.9.0.6")]
    recs += [s.state(f, "CLOSED", "SYN_SENT") for f in attempts]
    lst = full(s, src="0.0.0.0")
    recs += [lst, counter(s, "ListenOverflows", 3, 3)]
    recs[-1].ts_ns = lst.ts_ns
    s.advance(6.0)
    recs += [s.state(f, "SYN_SENT", "CLOSED") for f in attempts]
    k8 = {a.dst: a for a in only(feed_all(e, recs) + e.finish(), "K8") if a.condition == "connect-timeout"}
    assert k8["10.9.0.5"].message.endswith(
        f"connect timeouts, the listener 0.0.0.0:8080 of server (pid 700) in network namespace {NETNS} on this host "
        "has a full accept queue (5 waiting, backlog 4) and drops their SYNs (its K4 finding has the counts)."
    )
    assert k8["10.9.0.6"].message.endswith("connect timeouts, the peer or the path is dropping SYNs.")

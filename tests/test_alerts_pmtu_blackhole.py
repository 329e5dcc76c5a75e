"""K2 pmtu-black-hole (issue 34 item 2) on synthetic records: one finding per path (the hop's
namespace and the destination), naming the connections, the sizes dropped, retransmitted and
acknowledged, the MTU bounds, the hop's IpFragFails and whether its ICMP errors were dropped.
On real sockets: test_alerts_pmtu_blackhole_kernel.py."""

from __future__ import annotations

import msgspec

from tests.alert_streams import Flow, Stream, engine, feed_all, only
from translators.records import Record, StackCounter

HOP = 4026532999
ENGINE = {"engine": {"update_interval_s": 0}}


def frag_fails(s: Stream, value: int, delta: int) -> StackCounter:
    return StackCounter(**s._env("linux", "stack-counter", netns=HOP), mib="Ip", counter="FragFails", value=value,
                        delta=delta, netns_name="router")  # fmt: skip


def too_big(s: Stream, f: Flow, size: int = 1500) -> Record:
    return s.drop("PKT_TOO_BIG", f.src, f.sport, f.dst, f.dport, netns=HOP, len=size, drop_location="ip_forward+0x1a")


def icmp_drop(s: Stream, f: Flow) -> Record:
    return s.drop("NETFILTER_DROP", "10.0.9.1", 0, f.src, 0, l4="icmp", netns=HOP, drop_location="nft_do_chain+0x46f")


def hole(s: Stream, f: Flow, rounds: int, *, icmp: bool, small: int | None = None) -> list[Record]:
    """A connection whose 1448-byte segments are dropped at the hop, each retransmitted; with
    `small`, one segment of that size was acknowledged first (siftr out/in)."""
    recs: list[Record] = [s.state(f, "SYN_SENT", "ESTABLISHED")]
    if small:
        recs += [s.siftr(f, "out", th_seq=1000, data_sz=small), s.siftr(f, "in", th_ack=1000 + small)]
    for i in range(rounds):
        if icmp:  # the hop sends its ICMP error before it frees the packet (ip_forward)
            recs.append(icmp_drop(s, f))
        recs.append(too_big(s, f))
        s.advance(0.2 * 2**i)
        recs.append(s.retrans(f, tcp_payload_len=1448, segs=1, state="ESTABLISHED", retrans_kind="rto"))
    return recs


def test_a_hop_dropping_its_icmp_errors_is_one_critical_black_hole_finding_with_the_numbers():
    s = Stream()
    f = s.flow(dst="10.0.8.2", dport=443)
    recs = hole(s, f, 5, icmp=True, small=536) + [frag_fails(s, 5, 5)]
    e = engine(**ENGINE)
    alerts = feed_all(e, recs) + e.finish()
    got = only(alerts, "K2", "pmtu-black-hole")
    assert {a.alert_id for a in got} == {got[0].alert_id}
    last = got[-1]
    assert (last.severity, last.metric, last.count, last.members, last.member_conn_uuids) == (
        "critical", 5.0, 5, 1, [f.uuid]
    )  # fmt: skip
    # the connection's timeouts name the black hole as their likely cause
    assert only(alerts, "K2", "rto")[-1].message.endswith(
        " The likely cause: a path-MTU black hole on the way to 10.0.8.2 (its K2 pmtu-black-hole finding)."
    )
    assert (last.src, last.dst, last.dport, last.netns, last.tgid, last.comm) == (
        f.src, "10.0.8.2", 443, HOP, 4242, "client"
    )  # fmt: skip
    assert last.message == (
        f"Path-MTU black hole toward 10.0.8.2: the forwarding hop in network namespace {HOP} (router) on this host "
        f"dropped 5 packets of 1500 bytes as PKT_TOO_BIG (larger than its next link's MTU, with Don't Fragment set); "
        f"it counted 5 IpFragFails meanwhile (5 since it was created, as nstat -a reads them). Its ICMP errors "
        f'("fragmentation needed") never reached the sender {f.src}: 5 ICMP packets to it were dropped by a '
        f"firewall, NETFILTER_DROP at nft_do_chain in network namespace {HOP} (5), so the sender never learns the "
        f"smaller MTU and keeps sending full-size segments: a black hole. 1 connection of client (pid 4242) to "
        f"10.0.8.2:443 retransmitted 5 segments of up to 1448 bytes, while segments of up to 536 bytes got "
        f"through. The next link's MTU is below 1500 bytes (the smallest packet dropped) and at least 588 (536 "
        f"bytes that passed plus 52 of IP and TCP headers). Fix: let ICMP type 3 code 4 (IPv6: type 2, packet too "
        f"big) through, or clamp the TCP MSS at the hop (nft: tcp flags syn tcp option maxseg size set rt mtu)."
    )


def test_many_connections_on_one_path_are_one_finding_and_two_destinations_two():
    s = Stream()
    flows = [s.flow(dst="10.0.8.2", dport=443) for _ in range(3)] + [s.flow(dst="10.0.8.3", dport=443)]
    recs = [r for f in flows for r in hole(s, f, 3, icmp=False)]
    e = engine(**ENGINE)
    got = only(feed_all(e, recs) + e.finish(), "K2", "pmtu-black-hole")
    final = {a.dst: a for a in got}
    assert {a.alert_id for a in got} == {final["10.0.8.2"].alert_id, final["10.0.8.3"].alert_id}
    one = final["10.0.8.2"]
    assert (one.severity, one.metric, one.members, one.member_conn_uuids) == (
        "warning", 9.0, 3, [f.uuid for f in flows[:3]]
    )  # fmt: skip
    assert (
        " 3 connections of client (pid 4242) to 10.0.8.2:443 retransmitted 9 segments of up to 1448 bytes; no "
        "smaller segment of theirs is known to have got through (siftr provider: the sizes acknowledged). "
        "The next link's MTU is below 1500 bytes (the smallest packet dropped)."
    ) in one.message
    assert (
        'No drop of its ICMP errors ("fragmentation needed") was seen on this host: if 10.0.0.1 keeps '
        "retransmitting full-size segments, they are lost or filtered on the way back."
    ) in one.message


def test_a_sender_that_learns_the_mtu_says_the_icmp_was_delivered():
    s = Stream()
    f = s.flow(dst="10.0.8.2", dport=443)
    recs = hole(s, f, 3, icmp=False)
    recs.append(s.retrans(f, tcp_payload_len=1228, segs=1, state="ESTABLISHED", retrans_kind="rto"))
    e = engine(**ENGINE)
    last = only(feed_all(e, recs) + e.finish(), "K2", "pmtu-black-hole")[-1]
    assert last.severity == "warning"
    assert (
        "Its ICMP errors reached the sender 10.0.0.1: it retransmitted in segments of 1228 bytes afterwards (the "
        "smaller MTU was learnt)."
    ) in last.message
    assert "retransmitted 4 segments of up to 1448 bytes" in last.message


def test_fewer_drops_than_the_threshold_or_unrelated_icmp_drops_raise_nothing():
    s = Stream()
    f = s.flow(dst="10.0.8.2", dport=443)
    other = s.flow(src="10.0.0.7", dst="10.0.8.2", dport=443)
    recs = hole(s, f, 2, icmp=True) + [icmp_drop(s, other) for _ in range(5)]
    e = engine(**ENGINE)
    assert only(feed_all(e, recs) + e.finish(), "K2", "pmtu-black-hole") == []


def test_an_ipv6_hop_names_ip6fragfails_and_packet_too_big():
    s = Stream()
    f = s.flow(src="fd00::1", dst="fd00:8::2", dport=443)
    recs: list[Record] = []
    for _ in range(3):
        icmp = s.drop(
            "NETFILTER_DROP", "fd00::9", 0, f.src, 0, l4="icmpv6", netns=HOP, drop_location="nft_do_chain+0x4"
        )
        recs.append(msgspec.structs.replace(icmp, ip_ver=6))
        recs.append(msgspec.structs.replace(too_big(s, f), ip_ver=6))
    recs.append(StackCounter(**s._env("linux", "stack-counter", netns=HOP), mib="Ip6", counter="FragFails", value=3,
                             delta=3))  # fmt: skip
    e = engine(**ENGINE)
    last = only(feed_all(e, recs) + e.finish(), "K2", "pmtu-black-hole")[-1]
    assert (last.severity, last.metric, last.members) == ("critical", 3.0, 1)
    assert (
        f"dropped 3 packets of 1500 bytes as PKT_TOO_BIG (larger than its next link's MTU, with Don't Fragment set); "
        f"it counted 3 Ip6FragFails meanwhile (3 since it was created, as nstat -a reads them). Its ICMP errors "
        f'("packet too big") never reached the sender fd00::1: 3 ICMP packets to it were dropped by a firewall, '
        f"NETFILTER_DROP at nft_do_chain in network namespace {HOP} (3),"
    ) in last.message
    assert (
        "1 connection to [fd00:8::2]:443 had no retransmit recorded (tcp provider); no smaller segment" in last.message
    )


def beyond(s: Stream, f: Flow, acked: int, rounds: int) -> list[Record]:
    """No hop of this host drops anything: one segment of `acked` bytes is acknowledged, then
    1448-byte segments are retransmitted `rounds` times."""
    recs: list[Record] = [s.state(f, "SYN_SENT", "ESTABLISHED")]
    recs += [s.siftr(f, "out", th_seq=1000, data_sz=acked), s.siftr(f, "in", th_ack=1000 + acked)]
    for i in range(rounds):
        s.advance(0.2 * 2**i)
        recs.append(s.retrans(f, tcp_payload_len=1448, segs=1, state="ESTABLISHED", retrans_kind="rto"))
    return recs


def test_large_segments_retransmitted_while_smaller_ones_pass_are_a_suspected_hole_beyond_this_host():
    s = Stream()
    f = s.flow(dst="10.0.8.2", dport=443)
    e = engine(**ENGINE)
    got = only(feed_all(e, beyond(s, f, 1000, 4)) + e.finish(), "K2", "pmtu-black-hole")
    assert {a.alert_id for a in got} == {got[0].alert_id}
    last = got[-1]
    assert (last.severity, last.metric, last.count, last.members, last.member_conn_uuids, last.dst, last.dport) == (
        "warning", 4.0, 4, 1, [f.uuid], "10.0.8.2", 443
    )  # fmt: skip
    assert last.message == (
        "Path-MTU black hole suspected toward 10.0.8.2: 1 connection of client (pid 4242) to 10.0.8.2:443 "
        "retransmitted 4 segments of up to 1448 bytes and no segment that large was ever acknowledged, while "
        "segments of up to 1000 bytes got through. No hop on this host dropped them: a router beyond it drops "
        'packets larger than its next link\'s MTU and its ICMP "fragmentation needed" does not come back (filtered '
        "on the way, or never sent). The path carries 1000 bytes of payload per segment but not 1448. Fix: let ICMP "
        "type 3 code 4 (IPv6: type 2, packet too big) through, or clamp the TCP MSS (nft: tcp flags syn tcp option "
        "maxseg size set rt mtu)."
    )


def test_ordinary_loss_of_full_size_segments_that_also_pass_is_no_hole():
    s = Stream()
    e = engine(**ENGINE)
    lossy = beyond(s, s.flow(dst="10.0.8.2", dport=443), 1448, 6)  # full-size segments pass too
    few = beyond(s, s.flow(dst="10.0.8.3", dport=443), 1000, 2)  # two retransmits: below the threshold
    alerts = feed_all(e, lossy + few) + e.finish()
    assert only(alerts, "K2", "pmtu-black-hole") == []
    assert "path-MTU" not in only(alerts, "K2", "rto")[-1].message

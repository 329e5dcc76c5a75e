"""Why a connect failed (issue 34 item 2), on synthetic records: K14's "Why:" sentence per
destination and K8's connect-timeout cause. On real sockets: test_alerts_connect_causes_kernel.py."""

from __future__ import annotations

from tests.alert_streams import Flow, Stream, engine, feed_all, only
from translators.records import Record

RULES = {"K14": {"min_attempts": 2}}


def attempt(s: Stream, f: Flow, *, drops: int = 0, loose: int = 0, refused: bool = False, wait: float = 3.0,
            retries: int = 2) -> list[Record]:  # fmt: skip
    """One connect: SYN_SENT, its SYN and retries (each dropped here or in another namespace
    if asked), then refused or closed."""
    out: list[Record] = [s.state(f, "CLOSED", "SYN_SENT")]
    for i in range(retries + 1):
        if i:
            out.append(s.retrans(f, state="SYN_SENT", retrans_kind="syn"))
        if drops:
            out.append(s.drop("NETFILTER_DROP", f.src, f.sport, f.dst, f.dport, conn_uuid=f.uuid, netns=11,
                              drop_location="nft_do_chain+0x46f"))  # fmt: skip
        if loose:
            out.append(s.drop("NETFILTER_DROP", f.src, f.sport, f.dst, f.dport, netns=22,
                              drop_location="nft_do_chain+0x46f"))  # fmt: skip
        if refused:
            out.append(s.reset(f, "peer", "SYN_SENT"))
            break
        s.advance(wait / (retries + 1))
    out.append(s.state(f, "SYN_SENT", "CLOSED"))
    return out


def why(recs: list[Record]) -> str:
    e = engine(**RULES)
    a = only(feed_all(e, recs) + e.finish(), "K14")[-1]
    return a.message.split(" Why: ", 1)[1]


def test_refused_connects_say_the_peer_answered_with_a_rst():
    s = Stream()
    recs = [r for _ in range(2) for r in attempt(s, s.flow(dport=81), refused=True)]
    assert why(recs) == (
        "2 refused: 10.0.0.2 answered the SYN with a RST (nothing listens on 10.0.0.2:81, or a firewall there "
        "rejects it)."
    )


def test_syns_dropped_here_or_in_another_namespace_name_the_reason_place_and_count():
    s = Stream()
    recs = attempt(s, s.flow(dport=82), drops=1) + attempt(s, s.flow(dport=82), loose=1)
    assert why(recs) == (
        "2 timed out with every SYN dropped on this host: NETFILTER_DROP at nft_do_chain in network namespace 11 "
        "(3), NETFILTER_DROP at nft_do_chain in network namespace 22 (3)."
    )


def test_unanswered_and_early_closes_are_told_apart():
    s = Stream()
    recs = attempt(s, s.flow(dport=83)) + attempt(s, s.flow(dport=83), wait=0.3, retries=0)
    assert why(recs) == (
        "1 timed out with 3 SYNs sent and none answered: dropped upstream, or 10.0.0.2 is down or gone; 1 closed "
        "before the first SYN retry without an answer: the application gave up, or an ICMP error (unreachable) "
        "ended the attempt."
    )


def test_k8_names_the_local_drop_and_keeps_the_path_when_the_syns_left():
    s = Stream()
    e = engine()
    recs = attempt(s, s.flow(dport=84), drops=1) + attempt(s, s.flow(dport=85))
    k8 = {a.dport: a for a in only(feed_all(e, recs) + e.finish(), "K8", "connect-timeout")}
    assert k8[84].message.endswith(
        "connect timeouts, the latest one's 3 SYNs were all dropped on this host: NETFILTER_DROP at nft_do_chain in "
        "network namespace 11 (3)."
    )
    assert k8[85].message.endswith("connect timeouts, the peer or the path is dropping SYNs.")

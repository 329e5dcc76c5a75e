"""Why a RST was received (issue 34 item 2), on synthetic records: K3's *Why:* per destination
matches each received RST with the one this host's stack sent, in either order, and tells a
forged one and a remote one apart. On real sockets: test_alerts_reset_causes_kernel.py."""

from __future__ import annotations

from tests.alert_streams import Flow, Stream, engine, feed_all, only
from translators.records import Record

RULES = {"K3": {"peer_min_connections": 2}}
SERVER = "10.0.0.2"


def refused(s: Stream, f: Flow, *, stack_first: bool | None, reason: str = "NO_SOCKET") -> list[Record]:
    """A connect refused; stack_first: the server's own RST record comes before (True) or after
    (False) the client's, or there is none (None)."""
    out: list[Record] = [s.state(f, "CLOSED", "SYN_SENT")]
    back = Flow(f.dst, f.dport, f.src, f.sport, 0, None, None)
    sent = s.reset(back, "local", None, reason=reason, netns=7, flow_overrides={"conn_uuid": None, "sock_cookie": None})
    got = s.reset(f, "peer", "SYN_SENT")
    if stack_first is None:
        out.append(got)
    else:
        out += [sent, got] if stack_first else [got, sent]
    s.advance(0.5)
    return out


def why(recs: list[Record], port: int) -> str:
    e = engine(**RULES)
    k3 = [a for a in only(feed_all(e, recs) + e.finish(), "K3", "peer-share") if a.dport == port]
    return k3[-1].message.split(" Why: ", 1)[1]


def test_the_servers_stack_is_named_with_its_reason_whichever_record_comes_first():
    s = Stream()
    recs = refused(s, s.flow(dport=81), stack_first=True) + refused(s, s.flow(dport=81), stack_first=False)
    assert why(recs, 81) == (
        f"2 refused during the handshake: the TCP stack of {SERVER} (network namespace 7 of this host) sent them, "
        "reason NO_SOCKET (no socket for the segment: nothing listens on the port, or the connection is gone)."
    )


def test_a_rst_no_stack_sent_is_a_firewall_or_middlebox_on_a_local_address_else_the_remote_peer():
    s = Stream()
    local = refused(s, s.flow(dport=81), stack_first=True)  # teaches that 10.0.0.2 is an address of this host
    recs = local + [r for _ in range(2) for r in refused(s, s.flow(dport=82), stack_first=None)]
    assert why(recs, 82) == (
        f"2 refused during the handshake: no RST left the TCP stack of {SERVER}, an address of this host: a "
        "firewall rule (reject with tcp reset) or a middlebox sent them."
    )
    s = Stream()
    recs = [r for _ in range(2) for r in refused(s, s.flow(dport=82), stack_first=None)]
    assert (
        why(recs, 82)
        == f"2 refused during the handshake: sent by {SERVER} or a middlebox on the way (not on this host)."
    )

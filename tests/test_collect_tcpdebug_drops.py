"""Kernel test: tcpdebug's debug-drop records carry the dropped segment's sequence number and
length at every drop point (issue 16, item 3), including those after tcp_data_queue() has
pulled the TCP header (TCP_OLD_DATA, TCP_OFOMERGE, TCP_ZEROWINDOW, ...), where the header sits
before skb->data. Scenario: the server's ACKs are black-holed by nftables in a namespace the
test makes, so the client retransmits data the server already has, and the server drops each
copy as old data: every drop is one of the client's retransmissions, segment for segment.
Keep in sync with kmod (debug_drop) and translators/tcpdebug.py."""

from __future__ import annotations

import time
from collections import Counter

from tests.kernel_support import cookie_of, kernel, tracing
from tests.netns_lab import connected, netns_lab, receive
from translators.records import TcpDebugSnapshot, TcpRetransmit

pytestmark = kernel


def test_data_dropped_as_old_carries_the_sequence_and_length_of_the_retransmission_it_was() -> None:
    with netns_lab() as ns, tracing(("tcp", "tcpdebug"), netns=ns.inode) as cap:
        lst, client, server = connected(ns)
        ns.drop(client.getsockname()[1], "meta length >= 0")  # everything to the client: its ACKs
        client.sendall(b"o" * 20000)
        receive(server, 20000)
        time.sleep(1.0)  # the client's probe and RTOs resend what the server holds
        ns.stop_dropping()
        time.sleep(0.3)
        server_cookie = cookie_of(server)
        records = cap.settle(quiet=0.3)
        for s in (client, server, lst):
            s.close()
    drops = [r for r in records if isinstance(r, TcpDebugSnapshot) and r.probe == "debug-drop"]
    retrans = [r for r in records if isinstance(r, TcpRetransmit) and r.err == 0]
    assert len(drops) >= 2 and {d.drop_reason for d in drops} == {"TCP_OLD_DATA"}
    assert {d.sock_cookie for d in drops} == {server_cookie}
    assert Counter((d.tcp_seq, d.tcp_payload_len) for d in drops) == Counter(
        (r.tcp_seq, r.tcp_payload_len) for r in retrans
    )

"""Kernel tests: a packet dropped where no socket holds it (forwarded through a router
namespace on this host) carries its addresses, ports and protocol from its own headers,
so the webapp can put it on its connection: a TCP connection through a path-MTU black hole
(tests/router_lab.py), its full-size segments dropped at the router as PKT_TOO_BIG, the
count equal to the router's IpFragFails/Ip6FragFails; stored, they are on the client's
connection page (webapp/dashboard/conn_drops.py)."""

from __future__ import annotations

import socket
import threading

import pytest

from tests.kernel_support import cookie_of, kernel, tracing
from tests.router_lab import router_lab
from translators.records import SkbDrop, connection_uuid
from webapp.dashboard import conn_drops
from webapp.traces.models import Connection
from webapp.traces.store import store_batch

pytestmark = [*kernel, pytest.mark.django_db]


def too_big(records: list) -> list[SkbDrop]:  # type: ignore[type-arg]
    return [r for r in records if isinstance(r, SkbDrop) and r.drop_reason_str == "PKT_TOO_BIG"]


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6], ids=["ipv4", "ipv6"])
def test_a_forwarded_segment_too_big_for_the_next_hop_carries_its_tuple(family: int) -> None:
    with router_lab() as lab:
        server_addr = lab.server_addr if family == socket.AF_INET else lab.server_addr6
        lst = lab.socket(lab.server, family)
        lst.bind((server_addr, 0))
        lst.listen()
        port = lst.getsockname()[1]
        client = lab.socket(lab.client, family)
        before = lab.frag_fails()
        with tracing(("tcp", "skb"), port=port) as cap:
            client.connect((server_addr, port))
            cookie = cookie_of(client)
            server, _ = lst.accept()
            sender = threading.Thread(target=lambda: client.sendall(b"x" * 20000), daemon=True)
            sender.start()
            cap.wait_for(lambda recs: len(too_big(recs)) >= 3)
            # the sender retransmits into the hole with backoff: count where the router's
            # counter held still across a settled read (no drop between the two reads)
            for _ in range(20):
                after = lab.frag_fails()
                records = cap.settle()
                if lab.frag_fails() == after:
                    break
        local, peer = client.getsockname(), client.getpeername()
        for s in (client, server, lst):
            s.close()
    got = too_big(records)
    assert len(got) == after - before
    want_family = 4 if family == socket.AF_INET else 6
    assert {(r.ip_ver, r.src, r.sport, r.dst, r.dport, r.l4_proto, r.netns) for r in got} == {
        (want_family, local[0], local[1], peer[0], peer[1], "tcp", lab.router_inode)
    }
    assert {(r.conn_uuid, r.comm, r.pid) for r in got} == {(None, None, None)}  # no socket held them
    store_batch(records)
    conn = Connection.objects.get(conn_uuid=connection_uuid("test-host", "test-boot", cookie))
    listed = conn_drops.drops(conn)
    # (its own socket's drops are listed too: a late segment after the close, TCP_INVALID_SYN or the like)
    too_big_listed = [d["matched"] for d in listed if d["drop_reason_str"] == "PKT_TOO_BIG"]
    assert too_big_listed == ["addresses"] * len(got)

"""Kernel tests of the tcp provider: state sequences, attribution, resets, retransmissions.

Real eBPF programs, real loopback traffic made here, filtered on this test's ports.
"""

from __future__ import annotations

import math
import os
import socket
import struct
import subprocess
import time

import pytest

from tests import kernel_expect
from tests.kernel_support import bound_listener, cookie_of, free_port, kernel, my_comm, snmp_tcp, tracing
from translators.records import Record

pytestmark = kernel


def states(records: list[Record], cookie: int) -> list[tuple[str, str, bool]]:
    return [(r.prev_state, r.state, r.inferred) for r in records if r.kind == "tcp_state" and r.sock_cookie == cookie]  # type: ignore[attr-defined]


def destroyed(cookies: set[int]):  # type: ignore[no-untyped-def]
    return lambda recs: cookies <= {r.sock_cookie for r in recs if r.kind == "connection"}


@pytest.mark.matrix
@pytest.mark.parametrize("softirq_hooks", [False, True], ids=["preempt count", "softirq hooks"])
def test_a_loopback_connection_gives_exact_state_sequences_on_both_ends_attributed_to_this_process(
    softirq_hooks: bool,
) -> None:
    lst = bound_listener()
    port = lst.getsockname()[1]
    with tracing(("tcp",), port=port, softirq_hooks=softirq_hooks) as cap:
        lst.listen()
        client = socket.create_connection(("127.0.0.1", port))
        server, _ = lst.accept()
        client_cookie, server_cookie, lport = cookie_of(client), cookie_of(server), client.getsockname()[1]
        client.sendall(b"x" * 1000)
        assert server.recv(4096)
        client.close()  # active closer
        assert server.recv(10) == b""  # its FIN arrived: CLOSE_WAIT
        server.close()
        lst.close()
        records = cap.wait_for(destroyed({client_cookie, server_cookie}))

    assert states(records, client_cookie) == [
        ("CLOSED", "SYN_SENT", False),
        ("SYN_SENT", "ESTABLISHED", False),
        ("ESTABLISHED", "FIN_WAIT_1", False),
        ("FIN_WAIT_1", "FIN_WAIT_2", False),
        ("FIN_WAIT_2", "TIME_WAIT", True),
        ("TIME_WAIT", "CLOSED", False),
    ]
    assert states(records, server_cookie) == [
        ("LISTEN", "SYN_RECEIVED", False),
        ("SYN_RECEIVED", "ESTABLISHED", False),
        ("ESTABLISHED", "CLOSE_WAIT", False),
        ("CLOSE_WAIT", "LAST_ACK", False),
        ("LAST_ACK", "CLOSED", False),
    ]
    ours = [r for r in records if r.kind == "tcp_state" and r.sock_cookie in (client_cookie, server_cookie)]
    assert {(r.pid, r.tgid, r.comm) for r in ours} == {(os.getpid(), os.getpid(), my_comm())}
    softirq = [r for r in ours if r.ctx == "softirq"]
    assert softirq, "some transitions (peer FIN, final ACK) run in softirq"
    assert {r.attribution for r in softirq} == {"owner-map"}
    inferred = [r for r in ours if r.inferred]
    assert [r.approx for r in inferred] == [["state"]]
    established = [r for r in ours if r.sock_cookie == client_cookie and r.state == "ESTABLISHED"][0]
    assert (established.src, established.sport, established.dst, established.dport) == (
        "127.0.0.1",
        lport,
        "127.0.0.1",
        port,
    )
    assert established.conn_uuid and established.provider == "tcp" and established.probe == "state-change"
    final = {r.sock_cookie: r for r in records if r.kind == "connection"}
    # tcp_sock counts sequence space: the SYN and FIN each take one (RFC 4898 ThruOctetsAcked)
    assert final[client_cookie].bytes_acked == 1000 + 2  # type: ignore[attr-defined]
    assert final[server_cookie].bytes_received == 1000 + 1  # type: ignore[attr-defined]
    assert final[client_cookie].source == "kernel" and final[client_cookie].probe == "destroy"  # type: ignore[attr-defined]


def test_connecting_to_a_closed_port_gives_a_reset_received_in_syn_sent() -> None:
    port = free_port()
    with tracing(("tcp",), port=port) as cap:
        client = socket.socket()
        assert client.connect_ex(("127.0.0.1", port)) == 111  # ECONNREFUSED
        cookie, lport = cookie_of(client), client.getsockname()[1]
        probes = {"reset-received", "reset-sent"} if kernel_expect.RESETS_WITHOUT_SOCKET else {"reset-received"}
        cap.wait_for(lambda recs: {r.probe for r in recs} >= probes)
        client.close()
        records = cap.settle(quiet=0.3)  # nothing more may come

    received = [r for r in records if r.probe == "reset-received"]
    assert len(received) == 1
    r = received[0]
    assert (r.sender, r.state, r.sock_cookie, r.pid) == ("peer", "SYN_SENT", cookie, os.getpid())  # type: ignore[attr-defined]
    assert (r.src, r.sport, r.dst, r.dport) == ("127.0.0.1", lport, "127.0.0.1", port)
    sent = [r for r in records if r.probe == "reset-sent"]
    # the closed port's answer, sent without a socket: a record from 6.10, before said lost
    assert cap.lost("tcp", "tcp_reset.no_socket") == (not kernel_expect.RESETS_WITHOUT_SOCKET)
    if not kernel_expect.RESETS_WITHOUT_SOCKET:
        assert sent == []
        return
    assert len(sent) == 1
    s = sent[0]
    assert (s.sender, s.reason, s.sock_cookie, s.active) == ("local", "NO_SOCKET", None, False)  # type: ignore[attr-defined]
    assert (s.src, s.sport, s.dst, s.dport) == ("127.0.0.1", port, "127.0.0.1", lport)


def test_an_abortive_close_with_so_linger_0_gives_a_reset_sent_and_the_peer_a_reset_received() -> None:
    lst = bound_listener()
    port = lst.getsockname()[1]
    with tracing(("tcp",), port=port) as cap:
        lst.listen()
        client = socket.create_connection(("127.0.0.1", port))
        server, _ = lst.accept()
        client_cookie, server_cookie = cookie_of(client), cookie_of(server)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        records = cap.wait_for(lambda recs: {r.probe for r in recs} >= {"reset-sent", "reset-received"})
        server.close()
        lst.close()

    sent = [r for r in records if r.probe == "reset-sent"]
    assert [(r.sock_cookie, r.sender, r.active, r.pid) for r in sent] == [(client_cookie, "local", True, os.getpid())]  # type: ignore[attr-defined]
    assert sent[0].reason  # type: ignore[attr-defined]
    got = [r for r in records if r.probe == "reset-received"]
    assert [(r.sock_cookie, r.sender, r.state) for r in got] == [(server_cookie, "peer", "ESTABLISHED")]  # type: ignore[attr-defined]


@pytest.fixture
def nft_loss():  # type: ignore[no-untyped-def]
    """An nftables table dropping a few % of the data segments arriving for one port (input: a local output drop is reported back to TCP and is not a loss); deleted afterwards."""
    table = f"nettrail_test_{os.getpid()}"
    made: list[str] = []

    def make(port: int, percent: int) -> None:
        rules = (
            f"table inet {table} {{\n chain inp {{\n type filter hook input priority 0;\n"
            f" tcp dport {port} meta length > 200 numgen random mod 100 < {percent} drop\n }}\n}}\n"
        )
        subprocess.run(["nft", "-f", "-"], input=rules, text=True, check=True)
        made.append(table)

    yield make
    for t in made:
        subprocess.run(["nft", "delete", "table", "inet", t], check=False)


@pytest.mark.matrix
@pytest.mark.slow
def test_retransmissions_under_nftables_loss_match_the_kernels_tcp_retrans_segs(nft_loss) -> None:  # type: ignore[no-untyped-def]
    lst = bound_listener()
    port = lst.getsockname()[1]
    nft_loss(port, 5)
    chunk, count = b"r" * 1000, 1500
    with tracing(("tcp",), port=port) as cap:
        lst.listen()
        client = socket.socket()
        # Small unmerged segments: GSO would otherwise hand nftables 64 KiB super-packets.
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        before = snmp_tcp("RetransSegs")
        client.connect(("127.0.0.1", port))
        server, _ = lst.accept()
        server.settimeout(0.01)
        got = 0
        deadline = time.monotonic() + 60
        for _ in range(count):
            client.sendall(chunk)
            try:
                got += len(server.recv(1 << 20))
            except TimeoutError:
                pass
        server.settimeout(10.0)  # a lost segment waits for its RTO, backed off on a slow machine
        while got < len(chunk) * count and time.monotonic() < deadline:
            got += len(server.recv(1 << 20))
        after = snmp_tcp("RetransSegs")
        cookie = cookie_of(client)
        client.close()
        server.close()
        lst.close()
        records = cap.settle(quiet=0.5)

    assert got == len(chunk) * count
    retrans = [r for r in records if r.kind == "tcp_retransmit" and r.sock_cookie == cookie]
    ours = sum(r.segs for r in retrans if r.err == 0)  # type: ignore[attr-defined]
    kernel_count = after - before
    assert ours > 10, "5% loss on 1500 segments must cause retransmissions"
    # RetransSegs is host-wide: other traffic on this machine may add a few.
    assert ours <= kernel_count <= ours + max(3, math.ceil(0.05 * ours))
    assert all(r.tcp_payload_len and r.tcp_seq is not None for r in retrans)  # type: ignore[attr-defined]
    # the congestion state: the retransmissions carry it on every kernel; its changes are
    # records where tcp_cong_state_set exists (not on 5.10: none, and said)
    assert {r.ca_state for r in retrans} & {"Recovery", "Loss"}  # type: ignore[attr-defined]
    changes = {r.ca_state for r in records if r.kind == "tcp_cong_state" and r.sock_cookie == cookie}  # type: ignore[attr-defined]
    assert cap.lost("tcp", "tcp_cong_state") == (not kernel_expect.CONG_STATE_RECORDS)
    if kernel_expect.CONG_STATE_RECORDS:
        assert changes & {"Recovery", "Loss"}
    else:
        assert changes == set()

"""Kernel tests of the tcpdebug provider: input, output, user and drop snapshots of a loopback connection."""

from __future__ import annotations

import os
import socket
import struct

import pytest

from tests import kernel_expect
from tests.kernel_support import bound_listener, cookie_of, kernel, tracing
from tests.packets import checksum
from translators.records import TcpDebugSnapshot

pytestmark = kernel


def out_of_window_segment(sport: int, dport: int, seq: int) -> bytes:
    """An IPv4 TCP ACK with data far outside the receiver's window (the kernel fills the IP checksum)."""
    payload = b"junk"
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, 0x10, 1024, 0, 0) + payload
    pseudo = socket.inet_aton("127.0.0.1") * 2 + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", checksum(pseudo + tcp)) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0, 64, socket.IPPROTO_TCP, 0,
                     socket.inet_aton("127.0.0.1"), socket.inet_aton("127.0.0.1"))  # fmt: skip
    return ip + tcp


@pytest.mark.matrix
def test_a_connection_gives_input_output_user_and_drop_snapshots() -> None:
    lst = bound_listener()
    port = lst.getsockname()[1]
    with tracing(("tcpdebug",), port=port) as cap:
        lst.listen()
        client = socket.create_connection(("127.0.0.1", port))
        server, _ = lst.accept()
        client_cookie, server_cookie, cport = cookie_of(client), cookie_of(server), client.getsockname()[1]
        client.sendall(b"d" * 5000)
        got = 0
        while got < 5000:
            got += len(server.recv(65536))
        with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW) as raw:
            raw.sendto(out_of_window_segment(cport, port, 0x12345678), ("127.0.0.1", 0))
        client.close()
        assert server.recv(10) == b""
        server.close()
        lst.close()
        records = cap.wait_for(
            lambda recs: {r.prureq_str for r in recs if isinstance(r, TcpDebugSnapshot)} >= {"DETACH"}
        )

    snaps = [r for r in records if isinstance(r, TcpDebugSnapshot)]
    by_probe = {r.probe for r in snaps}
    # TCP's drop points are told by kfree_skb's reason (5.17+): before, none, and said
    drop_points = kernel_expect.DROP_REASONS
    assert cap.lost("tcpdebug", "tcp_debug.drop") == (not drop_points)
    assert by_probe == {"debug-input", "debug-output", "debug-user"} | ({"debug-drop"} if drop_points else set())
    user = {(r.sock_cookie, r.prureq_str) for r in snaps if r.direction == "user"}
    assert {(client_cookie, "CONNECT"), (client_cookie, "SHUTDOWN")} <= user
    assert {(server_cookie, "DETACH"), (client_cookie, "DETACH")} <= user
    # SEND and RCVD come from sock_send_length/sock_recv_length (6.3+): named lost before
    send, rcvd = (client_cookie, "SEND") in user, (server_cookie, "RCVD") in user
    assert (send, rcvd) == (
        not cap.lost("tcpdebug", "tcp_debug.user_send"),
        not cap.lost("tcpdebug", "tcp_debug.user_rcvd"),
    )
    assert any(r.prureq_str == "LISTEN" for r in snaps)
    drops = [r for r in snaps if r.direction == "drop"]
    # before rx_sk (6.11: 6.1's 3-argument kfree_skb) an incoming segment's drop has no socket
    no_sock = not kernel_expect.DROP_RX_SK
    assert cap.lost("tcpdebug", "tcp_debug.drop_sock") == (no_sock and drop_points)
    expected = (None if no_sock else server_cookie, 0x12345678, 4)
    assert [(r.sock_cookie, r.tcp_seq, r.tcp_payload_len) for r in drops] == ([expected] if drop_points else [])
    if drop_points:
        assert drops[0].drop_reason is not None and drops[0].drop_reason.startswith("TCP_")
        assert drops[0].hook == "tp_btf/kfree_skb" and (no_sock or drops[0].state == "ESTABLISHED")
    data_in = [r for r in snaps if r.direction == "input" and r.sock_cookie == server_cookie and r.tcp_payload_len]
    # the injected segment is seen at input (tcp_probe fires before validation), then dropped
    assert [r.tcp_seq for r in data_in if r.tcp_seq == 0x12345678] == [0x12345678]
    assert sum(r.tcp_payload_len or 0 for r in data_in if r.tcp_seq != 0x12345678) == 5000
    assert all(r.rcv_nxt is not None and r.snd_una is not None and r.srtt_us for r in data_in)
    assert all(r.pid == os.getpid() for r in snaps if r.sock_cookie in (client_cookie, server_cookie))

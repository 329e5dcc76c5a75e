"""Kernel test: an abortive close (SO_LINGER 0) keeps the connection's tuple and counters in
its last records (issue 16, item 3). tcp_disconnect() zeroes the peer port, the local address
and the counters before the congestion reset and the destroy; the kernel side keeps what the
socket held at its change to CLOSE (map `closed`). Traffic in a namespace the test makes,
compared with the socket's own TCP_INFO read just before the close. Keep in sync with kmod
(inet_sock_set_state, tcp_destroy_sock, fill_flow)."""

from __future__ import annotations

import socket
import struct

from tests.kernel_support import cookie_of, kernel, tracing
from tests.netns_lab import netns_lab
from translators.records import Record

pytestmark = kernel


def tcp_info_counters(s: socket.socket) -> tuple[int, int, int, int]:
    """(bytes_acked, bytes_received, segs_out, segs_in) of struct tcp_info (linux/tcp.h offsets 120-143)."""
    info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 144)
    acked, received, segs_out, segs_in = struct.unpack_from("<QQII", info, 120)
    return acked, received, segs_out, segs_in


def abort() -> tuple[list[Record], int, tuple[str, int, str, int], tuple[int, int, int, int]]:
    """A client sends 1,000 bytes, reads 500, and aborts; its records, cookie, tuple and TCP_INFO then."""
    with netns_lab() as ns:
        lst = ns.socket()
        lst.bind(("127.0.0.1", 0))
        lst.listen()
        with tracing(("tcp", "siftr", "tcpdebug"), netns=ns.inode) as cap:
            client = ns.socket()
            client.connect(lst.getsockname())
            server, _ = lst.accept()
            client.sendall(b"a" * 1000)
            server.settimeout(2)
            assert len(server.recv(2000)) == 1000
            server.sendall(b"b" * 500)
            client.settimeout(2)
            assert len(client.recv(2000)) == 500
            cookie = cookie_of(client)
            tuple_ = (*client.getsockname(), *client.getpeername())
            info = tcp_info_counters(client)
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()
            records = cap.wait_for(lambda recs: any(r.kind == "connection" and r.sock_cookie == cookie for r in recs))
            server.close()
            lst.close()
            records = cap.settle(quiet=0.3)
    return [r for r in records if r.sock_cookie == cookie], cookie, tuple_, info


def test_the_last_records_of_an_aborted_connection_keep_its_tuple_and_counters() -> None:
    records, _, tuple_, (acked, received, segs_out, segs_in) = abort()
    kinds = {(r.kind, r.probe) for r in records}
    assert {("connection", "destroy"), ("flow_counters", "flow-counters"), ("tcp_cong_state", "cong-state")} <= kinds
    # every record but the connect's (CLOSED -> SYN_SENT fires before the local port is chosen)
    for r in (r for r in records if getattr(r, "state", None) != "SYN_SENT" and r.probe != "debug-user"):
        assert (r.src, r.sport, r.dst, r.dport) == tuple_, (r.kind, r.probe)  # type: ignore[attr-defined]
    [conn] = [r for r in records if r.kind == "connection"]
    assert (conn.bytes_acked, conn.bytes_received, conn.segs_out, conn.segs_in) == (acked, received, segs_out, segs_in)  # type: ignore[attr-defined]
    [final] = [r for r in records if r.kind == "flow_counters"]
    # the socket's own counters at its change to CLOSE (ss -tin just before the abort)
    assert (final.bytes_out, final.bytes_in) == (1000, 500)  # type: ignore[attr-defined]
    assert (final.packets_out, final.packets_in) == (segs_out, segs_in)  # type: ignore[attr-defined]
    detach = [r for r in records if r.kind == "tcpdebug_snapshot" and r.prureq_str == "DETACH"]  # type: ignore[attr-defined]
    assert [(r.src, r.sport, r.dst, r.dport) for r in detach] == [tuple_]  # type: ignore[attr-defined]

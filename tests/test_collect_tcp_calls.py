"""Kernel tests of TCP's send and receive calls (issue 32, "6.1 parity"): every call
attributes its socket to the caller and gives tcpdebug a SEND or RCVD user request with
the bytes it moved, at sock_send_length/sock_recv_length from Linux 6.3 and before at the
exits of tcp_sendmsg/tcp_recvmsg (fexit, kmod/tcp_functions.bpf.c). Which source a kernel
gives is pinned per kernel (tests/kernel_expect.py), so a fallback fails.

The sender and the receiver are forked children of the test process, which made the
connection: a record of a call, or of an event after it, names the child only if the call
itself was seen (connect/listen/close alone name the test process).
"""

from __future__ import annotations

import os
import select
import socket
from collections.abc import Callable

import pytest

from collector.bpf import btf, loader, variants
from tests import kernel_expect
from tests.kernel_expect import DEBIAN_11, DEBIAN_12, RELEASE, SOCKET_TRACEPOINTS
from tests.kernel_support import Capture, bound_listener, cookie_of, kernel, tracing
from translators.records import TcpDebugSnapshot, TcpStateChange

pytestmark = kernel

SIZES = (1000, 2345, 7)  # one send call each (blocking, small), one MSG_WAITALL receive each


def expected_source() -> str:
    """Where this kernel's TCP calls are seen: the socket tracepoints from 6.3; before, the
    functions' exits on Debian's 5.10 and 6.1 (whose prototypes kmod/ has); elsewhere where
    the kernel takes fexit and has one of those prototypes."""
    if SOCKET_TRACEPOINTS:
        return "socket tracepoints"
    if RELEASE == DEBIAN_11 or RELEASE in DEBIAN_12:
        return "kernel functions"
    declared = all(btf.func_args(f) in n for f, n in variants.TCP_FUNCTION_ARGS.items())
    return "kernel functions" if declared and kernel_expect.fexit_refused("tcp_sendmsg") is None else "none"


SOURCE = expected_source()
HOOKS = {
    "socket tracepoints": ("tp_btf/sock_send_length", "tp_btf/sock_recv_length"),
    "kernel functions": ("fexit/tcp_sendmsg", "fexit/tcp_recvmsg"),
}


def in_child(work: Callable[[], None]) -> int:
    """Run `work` in a forked child and wait for it; its pid (its tgid). The child exits 0
    only if `work` returned."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            work()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"child {pid} failed"
    return pid


def sender(sock: socket.socket) -> Callable[[], None]:
    def send() -> None:
        for size in SIZES:
            assert sock.send(b"s" * size) == size

    return send


def receiver(sock: socket.socket) -> Callable[[], None]:
    def receive() -> None:
        for size in SIZES:
            assert len(sock.recv(size, socket.MSG_WAITALL)) == size

    return receive


def check_source(cap: Capture) -> None:
    """The session saw the calls where this kernel is pinned to (no fallback, no refusal)."""
    session = cap.session
    assert session.tcp_call_source() == SOURCE
    assert not [d for d in session.degraded if d[1] == "tcp_call.kernel_functions"]
    functions = {session.choice.programs.get(n, n) for n in loader.TCP_FUNCTION_PROGRAMS}
    attached = {session.choice.programs.get(n, n) for n in session.links}
    assert (functions <= attached) == (SOURCE == "kernel functions")


@pytest.mark.matrix
def test_every_send_and_receive_is_a_tcpdebug_user_request_with_its_bytes_and_its_caller() -> None:
    if SOURCE == "none":
        pytest.fail(f"{os.uname().release}: neither the socket tracepoints nor fexit on tcp_sendmsg")
    lst = bound_listener()
    port = lst.getsockname()[1]
    with tracing(("tcpdebug",), port=port) as cap:
        check_source(cap)
        lst.listen()
        client = socket.create_connection(("127.0.0.1", port))
        server, _ = lst.accept()
        client_cookie, server_cookie = cookie_of(client), cookie_of(server)
        sending = in_child(sender(client))
        receiving = in_child(receiver(server))
        client.close()
        server.close()
        lst.close()
        records = cap.wait_for(
            lambda recs: sum(r.prureq_str == "DETACH" for r in recs if isinstance(r, TcpDebugSnapshot)) >= 2
        )
    user = [r for r in records if isinstance(r, TcpDebugSnapshot) and r.prureq_str in ("SEND", "RCVD")]
    send_hook, recv_hook = HOOKS[SOURCE]
    sends = [(r.sock_cookie, r.tcp_payload_len, r.tgid, r.attribution, r.hook) for r in user if r.prureq_str == "SEND"]
    rcvds = [(r.sock_cookie, r.tcp_payload_len, r.tgid, r.attribution, r.hook) for r in user if r.prureq_str == "RCVD"]
    assert sends == [(client_cookie, n, sending, "current", send_hook) for n in SIZES]
    assert rcvds == [(server_cookie, n, receiving, "current", recv_hook) for n in SIZES]
    # a user request's snapshot is the socket's after the call: the bytes queued or read so far
    assert all(r.state == "ESTABLISHED" and r.ctx == "task" and r.tcp_seq is None for r in user)


@pytest.mark.matrix
def test_the_records_after_a_call_name_its_caller_not_the_process_that_connected() -> None:
    """tcp provider: the connect's records name the test process; once a child has sent (or
    received), the socket's later records (its close, made by the test process, and the
    peer's FIN and ACKs, in softirq) name that child: the owner map learned it at the call."""
    if SOURCE == "none":
        pytest.fail(f"{os.uname().release}: neither the socket tracepoints nor fexit on tcp_sendmsg")
    lst = bound_listener()
    port = lst.getsockname()[1]
    with tracing(("tcp",), port=port) as cap:
        check_source(cap)
        lst.listen()
        client = socket.create_connection(("127.0.0.1", port))
        server, _ = lst.accept()
        client_cookie, server_cookie = cookie_of(client), cookie_of(server)
        sending = in_child(sender(client))
        receiving = in_child(receiver(server))
        client.close()
        # the FIN in, seen without a receive call (which would make the test process its user)
        assert select.select([server], [], [], 10)[0] == [server]
        server.close()
        lst.close()
        records = cap.wait_for(
            lambda recs: (
                {(r.sock_cookie, r.state) for r in recs if isinstance(r, TcpStateChange)} >= {(server_cookie, "CLOSED")}
            )
        )
    changes = [r for r in records if isinstance(r, TcpStateChange)]

    def owners(cookie: int) -> list[tuple[str, str, int | None]]:
        return [(r.prev_state, r.state, r.tgid) for r in changes if r.sock_cookie == cookie]

    me = os.getpid()
    client_changes, server_changes = owners(client_cookie), owners(server_cookie)
    assert client_changes[:2] == [("CLOSED", "SYN_SENT", me), ("SYN_SENT", "ESTABLISHED", me)]
    assert client_changes[2] == ("ESTABLISHED", "FIN_WAIT_1", sending)
    assert {tgid for _, _, tgid in client_changes[2:]} == {sending}
    # the passive child inherits the listener's owner at birth, then its reader's
    assert server_changes[-3:] == [
        ("ESTABLISHED", "CLOSE_WAIT", receiving),
        ("CLOSE_WAIT", "LAST_ACK", receiving),
        ("LAST_ACK", "CLOSED", receiving),
    ]
    assert {tgid for _, _, tgid in server_changes[:-3]} == {me}

"""Kernel tests of process attribution (providers.md 9.3, docs/collector.md "Attribution
and context"): every record of a socket names that socket's owner, even when the event
fired in softirq (timer RTOs, the peer's FIN or RST processed on the other process's
stack over loopback), and `ctx`/`attribution` say where the attribution came from.

The two ends are two peer processes (tests/attribution_peer.py) with distinctive comms,
never the test process; over loopback in this namespace and over a veth pair between
two namespaces (tests/veth_lab.py). Losses come from an nftables table this test creates
and deletes, matching only the test's port.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.kernel_support import free_port, kernel, tracing
from tests.veth_lab import veth_lab
from translators.records import Record

pytestmark = kernel

PEER = Path(__file__).with_name("attribution_peer.py")
SERVER_COMM, CLIENT_COMM = "nt-attr-srv", "nt-attr-cli"
HELD = 8000  # bytes each end sends while the drop rule holds (fits the send buffer)
# State transitions only the socket user's own system call makes: attributed from current.
USER_TRANSITIONS = {
    ("CLOSED", "SYN_SENT"),
    ("CLOSED", "LISTEN"),
    ("ESTABLISHED", "FIN_WAIT_1"),
    ("CLOSE_WAIT", "LAST_ACK"),
    ("LISTEN", "CLOSED"),
}
USER_REQUESTS = {"SEND", "RCVD", "CONNECT", "LISTEN", "SHUTDOWN"}  # tcpdebug debug-user from a call


class Peer:
    """A peer process driven line by line; killed by pid if the test fails midway."""

    def __init__(
        self, comm: str, host: str, port: int, netns: str | None = None, unix: socket.socket | None = None
    ) -> None:
        cmd = [sys.executable, str(PEER), comm, host, str(port)] + ([str(unix.fileno())] if unix else [])
        if netns:
            cmd = ["ip", "netns", "exec", netns, *cmd]  # ip execs: the pid stays the peer's
        self.comm = comm
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
            pass_fds=[unix.fileno()] if unix else [],
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def do(self, line: str) -> int | None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline().split()
        assert reply and reply[0] == "ok", f"{self.comm} {line!r}: {reply}"
        return int(reply[1]) if len(reply) > 1 else None

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.communicate("", timeout=5)  # EOF on stdin ends it
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()


def nft(netns: str | None, *args: str) -> None:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    subprocess.run([*prefix, "nft", *args], check=True, capture_output=True, timeout=10)


@contextmanager
def dropping(port: int, namespaces: list[str | None]) -> Iterator[None]:
    """Drop every segment to or from `port` at input in each namespace (None = this one)."""
    table = f"nettrail_attr_{os.getpid()}"
    made: list[str | None] = []
    try:
        for ns in namespaces:
            nft(ns, "add", "table", "inet", table)
            made.append(ns)
            nft(ns, "add", "chain", "inet", table, "in", "{ type filter hook input priority 0 ; }")
            nft(ns, "add", "rule", "inet", table, "in", "tcp", "dport", str(port), "drop")
            nft(ns, "add", "rule", "inet", table, "in", "tcp", "sport", str(port), "drop")
        yield
    finally:
        for ns in made:
            nft(ns, "delete", "table", "inet", table)


@dataclass
class Run:
    server: Peer
    client: Peer
    server_socks: set[int]  # listener, both accepted children
    client_socks: set[int]
    lossy: tuple[int, int]  # (client, server) cookies of the connection that saw RTOs
    reset: tuple[int, int]  # (client, server) cookies of the aborted connection
    records: list[Record]


def exercise(host: str, port: int, server_ns: str | None, client_ns: str | None) -> Run:
    """Two connections between the peers: one with RTOs on both ends and a graceful close
    (client first), one the server aborts (RST); records until every socket is destroyed."""
    server = Peer(SERVER_COMM, host, port, server_ns)
    client = Peer(CLIENT_COMM, host, port, client_ns)
    try:
        with tracing(("tcp", "siftr", "tcpdebug"), port=port) as cap:
            listener = server.do("listen")
            c1 = client.do("connect")
            s1 = server.do("accept")
            client.do("send 100")
            server.do("recv 100")
            server.do("send 100")
            client.do("recv 100")
            with dropping(port, list(dict.fromkeys([server_ns, client_ns]))):
                client.do(f"send {HELD}")
                server.do(f"send {HELD}")
                time.sleep(0.9)  # RTOs fire from the timer at about 0.2 and 0.6 s
            server.do(f"recv {HELD}")
            client.do(f"recv {HELD}")
            client.do("close")
            server.do("eof")
            server.do("close")
            c2 = client.do("connect")
            s2 = server.do("accept")
            client.do("send 100")
            server.do("recv 100")
            server.do("abort")
            client.do("reset")
            client.do("close")
            server.do("quit")
            mine = {c1, s1, c2, s2}
            records = cap.wait_for(lambda recs: mine <= {r.sock_cookie for r in recs if r.kind == "connection"})
        assert None not in (listener, c1, s1, c2, s2)
        return Run(server, client, {listener, s1, s2}, {c1, c2}, (c1, s1), (c2, s2), records)  # type: ignore[arg-type]
    finally:
        client.stop()
        server.stop()


def check_attribution(run: Run) -> None:
    owner = {c: run.server for c in run.server_socks} | {c: run.client for c in run.client_socks}
    ours = [r for r in run.records if r.sock_cookie in owner]
    assert {r.sock_cookie for r in ours} == set(owner)
    assert os.getpid() not in {r.pid for r in run.records} | {r.tgid for r in run.records}
    for r in ours:
        who = owner[r.sock_cookie]  # type: ignore[index]
        assert (r.pid, r.tgid, r.comm) == (who.pid, who.pid, who.comm), r
        assert r.attribution == expected_source(r), r
        if r.attribution == "current":
            assert r.ctx == "task", r

    kinds = {r.kind for r in ours}
    assert kinds >= {
        "tcp_state",
        "tcp_retransmit",
        "tcp_cong_state",
        "tcp_reset",
        "siftr_sample",
        "tcpdebug_snapshot",
        "connection",
    }
    for cookie in run.lossy:  # both ends retransmitted from their timer, in softirq
        rto = [r for r in ours if r.kind == "tcp_retransmit" and r.sock_cookie == cookie and r.retrans_kind == "rto"]  # type: ignore[attr-defined]
        assert len(rto) >= 2, (cookie, rto)
        # A timer that expires while the owner holds the socket lock is deferred to its
        # release_sock(), in the owner's own system call: task context, rarely.
        assert "softirq" in {r.ctx for r in rto}, rto
        loss = [r for r in ours if r.kind == "tcp_cong_state" and r.sock_cookie == cookie and r.ca_state == "Loss"]  # type: ignore[attr-defined]
        assert loss
    # The peer's FIN and RST are processed where the kernel happens to run them (on
    # loopback, under the other process's system call): softirq, named after the owner.
    c1, s1 = run.lossy
    c2, s2 = run.reset
    close_wait = [r for r in ours if r.kind == "tcp_state" and r.sock_cookie == s1 and r.state == "CLOSE_WAIT"]
    assert [(r.ctx, r.attribution, r.pid) for r in close_wait] == [("softirq", "owner-map", run.server.pid)]
    received = [r for r in ours if r.kind == "tcp_reset" and r.probe == "reset-received"]
    assert [(r.sock_cookie, r.ctx, r.pid) for r in received] == [(c2, "softirq", run.client.pid)]
    sent = [r for r in ours if r.kind == "tcp_reset" and r.probe == "reset-sent"]
    assert [(r.sock_cookie, r.ctx, r.pid) for r in sent] == [(s2, "task", run.server.pid)]


def expected_source(r: Record) -> str:
    """current only where the socket's user made the call; the owner map everywhere else."""
    if r.kind == "tcp_state" and not r.inferred:  # type: ignore[attr-defined]
        return "current" if (r.prev_state, r.state) in USER_TRANSITIONS else "owner-map"  # type: ignore[attr-defined]
    if r.kind == "tcpdebug_snapshot" and r.direction == "user":  # type: ignore[attr-defined]
        return "current" if r.prureq_str in USER_REQUESTS else "owner-map"  # type: ignore[attr-defined]
    return "owner-map"


def test_records_over_loopback_carry_their_own_socket_owner_never_the_peer_process() -> None:
    check_attribution(exercise("127.0.0.1", free_port(), None, None))


def test_records_over_a_veth_pair_carry_their_own_socket_owner_never_the_peer_process() -> None:
    with veth_lab(gro=False) as lab:
        run = exercise(lab.addr_b, free_port(), lab.b, lab.a)  # free here too: the port filter sees only this test
    check_attribution(run)


def test_an_accepted_socket_handed_to_another_process_is_attributed_to_it_from_its_first_recv() -> None:
    """A passive child inherits its listener's owner; a socket passed to a worker
    (SCM_RIGHTS) follows its user from the worker's first recv on (last writer wins)."""
    port = free_port()
    give, take = socket.socketpair()
    server = Peer(SERVER_COMM, "127.0.0.1", port, unix=give)
    worker = Peer("nt-attr-wrk", "127.0.0.1", port, unix=take)
    client = Peer(CLIENT_COMM, "127.0.0.1", port)
    try:
        with tracing(("tcp", "siftr", "tcpdebug"), port=port) as cap:
            server.do("listen")
            client.do("connect")
            s1 = server.do("accept")
            client.do("send 100")
            server.do("give")
            assert worker.do("take") == s1
            worker.do("recv 100")
            worker.do("send 100")
            client.do("recv 100")
            worker.do("close")
            client.do("eof")
            client.do("close")
            server.do("quit")
            records = cap.wait_for(lambda recs: s1 in {r.sock_cookie for r in recs if r.kind == "connection"})
    finally:
        for peer in (client, worker, server):
            peer.stop()
        give.close()
        take.close()

    mine = sorted((r for r in records if r.sock_cookie == s1), key=lambda r: r.ts_ns)
    owners = [r.comm for r in mine]
    first = owners.index("nt-attr-wrk")
    assert owners == [SERVER_COMM] * first + ["nt-attr-wrk"] * (len(owners) - first)
    handover = mine[first]
    assert (handover.kind, handover.prureq_str, handover.attribution, handover.pid) == (  # type: ignore[attr-defined]
        "tcpdebug_snapshot",
        "RCVD",
        "current",
        worker.pid,
    )
    before = [(r.kind, r.attribution, r.pid) for r in mine[:first] if r.kind == "tcp_state"]
    assert before == [("tcp_state", "owner-map", server.pid)] * 2  # LISTEN->SYN_RECEIVED->ESTABLISHED
    after = [(r.prev_state, r.state, r.attribution, r.pid) for r in mine[first:] if r.kind == "tcp_state"]  # type: ignore[attr-defined]
    assert after == [
        ("ESTABLISHED", "FIN_WAIT_1", "current", worker.pid),
        ("FIN_WAIT_1", "FIN_WAIT_2", "owner-map", worker.pid),
        ("FIN_WAIT_2", "TIME_WAIT", "owner-map", worker.pid),
        ("TIME_WAIT", "CLOSED", "owner-map", worker.pid),
    ]
    assert [r.pid for r in mine if r.kind == "connection"] == [worker.pid]

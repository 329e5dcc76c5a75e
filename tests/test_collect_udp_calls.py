"""Kernel tests of udp-calls, the udp provider's always-on mode: a record for every send and
receive call on a UDP socket, with its peer, and no program on any packet. The peer of an
unconnected socket's call comes from the cgroup sock_addr hooks (kmod/udp_peer.bpf.c);
without a cgroup v2 hierarchy it is unknown (null), said as a degradation, and the skb
provider notes UDP senders at net_dev_queue instead. Counts against the namespace's
own SNMP counters."""

from __future__ import annotations

import ctypes
import platform
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from collector.bpf import layout, libbpf, loader
from tests import kernel_expect
from tests.kernel_support import Capture, kernel, tracing
from tests.netns_lab import delta, netns_lab
from translators.records import SkbDrop, SockEvent, UdpDatagram

pytestmark = kernel

SIZES = (11, 22, 33)
PER_PACKET = {"net_dev_queue", "netif_receive_skb"}


def calls(records: list, port: int) -> list[tuple]:  # type: ignore[type-arg]
    found = [
        (r.probe, r.src, r.sport, r.dst, r.dport, r.bytes, r.hook)
        for r in records
        if isinstance(r, UdpDatagram) and port in (r.sport, r.dport)
    ]
    return sorted(found, key=str)


SEND, RECV = "tp_btf/sock_send_length", "tp_btf/sock_recv_length"
HOOKS = {  # source -> (sendto's hook, recvfrom's) for an AF_INET socket; glibc's send/recv are sendto/recvfrom
    "socket tracepoints": (SEND, RECV),
    "kernel functions": ("fexit/udp_sendmsg", "fexit/udp_recvmsg"),
    "system calls": ("tp_btf/sys_exit:sendto", "tp_btf/sys_exit:recvfrom"),
}


def chosen_source(asked: str, cap: Capture) -> str:
    """The source pinned for this kernel when `asked` (tests/kernel_expect.py: the socket
    tracepoints from Linux 6.3, "none" before, said; the UDP functions on Debian 12's 6.1
    and 6.12, the system calls on 5.10 and on this host, which refuses fexit), which the
    session must have got: a fallback the kernel did not call for fails here."""
    want = kernel_expect.udp_call_source(asked)
    got = cap.session.udp_call_source()
    if want == "none":
        said = {what for p, what, _ in cap.session.degraded if p == "udp-calls"}
        assert said >= {"udp_call.send", "udp_call.receive"}, said
        assert got == asked
    else:
        assert got == want, cap.session.functions_why
    if asked == "kernel functions" and want == "system calls" and kernel_expect.fexit_refused():
        said = {what for p, what, _ in cap.session.degraded if p == "udp-calls"}
        assert cap.session.functions_why is None or "udp_call.kernel_functions" in said
    return want


@pytest.mark.matrix
def test_the_default_source_is_the_one_pinned_for_this_kernel_and_its_hooks_give_the_records() -> None:
    """No source asked, as `nettrail collect` runs: on stock Debian 12's 6.1 the UDP
    functions' exits (fexit), which must not fall back; on 6.12 and this host (6.3+) the
    socket tracepoints; on 5.10 the system calls. 6.12 must take the functions too when
    asked (the next test), and this host refuses fexit itself (a program of two
    instructions, no part of nettrail's, is refused): the system calls there."""
    want = kernel_expect.udp_call_source()
    if kernel_expect.RELEASE in kernel_expect.DEBIAN_12:
        assert kernel_expect.fexit_refused() is None
    with netns_lab() as ns, tracing(("udp-calls",), netns=ns.inode) as cap:
        assert cap.session.udp_call_source() == want and cap.session.functions_why is None
        with ns.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            tx.sendto(b"default", ("127.0.0.1", 9))
            sport = tx.getsockname()[1]
        records = cap.settle(quiet=0.5)
    assert calls(records, sport) == [("send", "0.0.0.0", sport, "127.0.0.1", 9, 7, HOOKS[want][0])]


@pytest.mark.matrix
def test_asked_for_the_kernel_functions_each_kernel_gives_its_pinned_source() -> None:
    """The UDP functions asked for: taken on Debian 12's 6.1 and 6.12 (fexit works there:
    a fallback fails this test); on this host, whose kernel refuses fexit (probed alone,
    below), and on 5.10 (udp_recvmsg has six parameters) the system calls."""
    want = kernel_expect.udp_call_source("kernel functions")
    refused = kernel_expect.fexit_refused()
    if kernel_expect.RELEASE in kernel_expect.DEBIAN_12:
        assert (want, refused) == ("kernel functions", None)
    elif kernel_expect.RELEASE != kernel_expect.DEBIAN_11:
        assert want == ("system calls" if refused else "kernel functions"), refused
    with netns_lab() as ns, tracing(("udp-calls",), netns=ns.inode, udp_call_source="kernel functions") as cap:
        assert cap.session.udp_call_source() == want, cap.session.functions_why
        links = set(cap.session.links)
        assert (set(loader.FUNCTION_PROGRAMS) <= links) == (want == "kernel functions")
        assert (set(loader.SYSCALL_PROGRAMS) <= links) == (want == "system calls")
        with ns.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            tx.sendto(b"asked", ("127.0.0.1", 9))
            sport = tx.getsockname()[1]
        records = cap.settle(quiet=0.5)
    assert calls(records, sport) == [("send", "0.0.0.0", sport, "127.0.0.1", 9, 5, HOOKS[want][0])]


@pytest.mark.matrix
@pytest.mark.parametrize("source", loader.UDP_CALL_SOURCES)
@pytest.mark.parametrize(
    ("family", "host", "any_addr"), [(socket.AF_INET, "127.0.0.1", "0.0.0.0"), (socket.AF_INET6, "::1", "::")]
)
def test_every_call_is_a_record_with_its_peer_and_no_program_runs_per_packet(
    family: int, host: str, any_addr: str, source: str
) -> None:
    with netns_lab() as ns, tracing(("udp-calls",), netns=ns.inode, udp_call_source=source) as cap:
        got = chosen_source(source, cap)
        loaded = set(cap.session.loaded_names())
        assert not loaded & PER_PACKET
        for other, names in loader.SOURCE_PROGRAMS.items():
            assert (set(names) <= loaded) == (other == got)
        lost = {what for p, what, _ in cap.session.degraded if p == "udp-calls"}
        if got == "none":
            pass  # asked for tracepoints this kernel lacks: said above, and nothing made up below
        elif got == "socket tracepoints":
            assert loader.CGROUP_PROGRAMS <= loaded and cap.session.degraded == ()
        else:  # what this source does not see is said; the calls it sees are not lost
            assert "udp_call" in lost and not lost & {"udp_call.send", "udp_call.receive"}
        before = ns.counters()
        with ns.socket(family, socket.SOCK_DGRAM) as rx, ns.socket(family, socket.SOCK_DGRAM) as tx:
            rx.bind((host, 0))
            port = rx.getsockname()[1]
            for size in SIZES:
                tx.sendto(b"u" * size, (host, port))  # unconnected: the peer from the call
            sport = tx.getsockname()[1]
            got_data = [rx.recvfrom(100) for _ in SIZES]  # the peer the call asked for
            tx.connect((host, port))  # connected: the peer from the socket
            tx.send(b"c" * 44)
            unasked = rx.recv(100)  # no address asked for: none is known
        after = ns.counters()
        records = cap.settle(quiet=0.5)
    assert [len(data) for data, _ in got_data] == list(SIZES) and len(unasked) == 44
    if got == "none":
        assert calls(records, port) == []
        return
    send, recv = HOOKS[got]
    if family == socket.AF_INET6:
        send, recv = send.replace("/udp_", "/udpv6_"), recv.replace("/udp_", "/udpv6_")
    assert calls(records, port) == sorted(
        [("send", any_addr, sport, host, port, size, send) for size in SIZES]
        + [("receive", host, port, host, sport, size, recv) for size in SIZES]
        + [("send", host, sport, host, port, 44, send), ("receive", host, port, None, None, 44, recv)],
        key=str,
    )
    assert {r.comm for r in records if isinstance(r, UdpDatagram)} == {"python"}
    if family == socket.AF_INET:  # /proc/net/snmp has IPv4's counters only
        assert delta(before, after, "UdpOutDatagrams", "UdpInDatagrams") == {
            "UdpOutDatagrams": len(SIZES) + 1,
            "UdpInDatagrams": len(SIZES) + 1,
        }


def test_without_cgroup_v2_the_peer_is_unknown_and_said_so_and_drops_keep_their_sender(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before 6.3 the source reads the peer from the call itself (the functions' msghdr, the
    system calls' sockaddr): nothing is lost for it there (pinned per kernel)."""
    monkeypatch.setenv("NETTRAIL_CGROUP2", "/nonexistent-cgroup2")
    want = kernel_expect.udp_call_source()
    with netns_lab() as ns, tracing(("udp-calls", "skb"), netns=ns.inode) as cap:
        loaded = set(cap.session.loaded_names())
        assert "net_dev_queue" in loaded and not loaded & loader.CGROUP_PROGRAMS  # skb's fallback
        assert cap.session.udp_call_source() == want
        peers = ("udp-calls", "dst/dport of unconnected sockets' calls", "no cgroup v2 hierarchy is mounted")
        if want == "socket tracepoints":
            assert cap.session.degraded == (peers,)
        else:
            assert peers not in cap.session.degraded
        with ns.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            tx.sendto(b"nobody", ("127.0.0.1", 9))  # a closed port: dropped inside this call
            sport = tx.getsockname()[1]
        records = cap.settle(quiet=0.5)
    peer = (None, None) if want == "socket tracepoints" else ("127.0.0.1", 9)
    assert calls(records, sport) == [("send", "0.0.0.0", sport, *peer, 6, HOOKS[want][0])]
    [drop] = [r for r in records if isinstance(r, SkbDrop)]
    assert (drop.drop_reason_str, drop.sport, drop.dport, drop.attribution, drop.comm) == (
        kernel_expect.drop_reason("NO_SOCKET"), sport, 9, "owner-map", "python",
    )  # fmt: skip


@pytest.mark.matrix
def test_the_first_datagram_of_a_socket_dropped_in_its_send_keeps_its_sender() -> None:
    """On loopback a datagram to a closed port is dropped inside the send call, before
    sock_send_length: the sendmsg hook has noted the sender by its port already, under the
    socket's network namespace (this thread is in another: the lab's sockets are made
    there, used from here). Before 6.2 the net_dev_queue program does, as before."""
    with netns_lab() as ns, tracing(("skb",), netns=ns.inode) as cap:
        fallback = loader.cgroup_unusable() is not None
        assert ("net_dev_queue" in cap.session.loaded_names()) == fallback, cap.session.cgroup_why
        with ns.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            tx.sendto(b"first", ("127.0.0.1", 9))
            sport = tx.getsockname()[1]
        records = cap.settle(quiet=0.5)
    [drop] = [r for r in records if isinstance(r, SkbDrop)]
    assert (drop.drop_reason_str, drop.sport, drop.attribution, drop.comm) == (
        kernel_expect.drop_reason("NO_SOCKET"),
        sport,
        "owner-map",
        "python",
    )


def test_cgroup_programs_that_will_not_attach_cost_only_the_peers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A directory that is no cgroup: the cgroup programs do not attach (EBADF here; a
    container that keeps the hierarchy's root from us says EPERM, taken the same way), which
    is said (failed) and costs the peers of unconnected calls, not the tracing. Before 6.2
    the peers' programs are not loaded (the source before 6.3 reads the peer from the call);
    before 5.12 the cookie programs are the cgroup programs that fail (their sockets then
    carry substitute cookies)."""
    monkeypatch.setenv("NETTRAIL_CGROUP2", str(tmp_path))
    want = kernel_expect.udp_call_source()
    if kernel_expect.RELEASE >= (6, 2):
        failing = set(loader.CGROUP_PROGRAMS)
    else:
        failing = set(loader.COOKIE_PROGRAMS) if kernel_expect.RELEASE < (5, 12) else set()
    with netns_lab() as ns, tracing(("udp-calls",), netns=ns.inode) as cap:
        assert set(cap.session.failed) == failing
        assert cap.session.udp_call_source() == want
        with ns.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            tx.sendto(b"still", ("127.0.0.1", 9))
            sport = tx.getsockname()[1]
        records = cap.settle(quiet=0.5)
    peer = (None, None) if want == "socket tracepoints" else ("127.0.0.1", 9)
    assert calls(records, sport) == [("send", "0.0.0.0", sport, *peer, 5, HOOKS[want][0])]


class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class Msghdr(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_void_p),
        ("namelen", ctypes.c_uint32),
        ("iov", ctypes.POINTER(Iovec)),
        ("iovlen", ctypes.c_size_t),
        ("control", ctypes.c_void_p),
        ("controllen", ctypes.c_size_t),
        ("flags", ctypes.c_int),
    ]


class Mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", Msghdr), ("len", ctypes.c_uint)]


def mmsg(sock: socket.socket, count: int, size: int, send: bool) -> int:
    """One sendmmsg/recvmmsg of `count` messages of `size` bytes: the messages moved."""
    libc = ctypes.CDLL(None, use_errno=True)
    bufs = [ctypes.create_string_buffer(b"m" * size, size) for _ in range(count)]
    iovs = [Iovec(ctypes.cast(b, ctypes.c_void_p), size) for b in bufs]
    vec = (Mmsghdr * count)()
    for i, iov in enumerate(iovs):
        vec[i].hdr.iov = ctypes.pointer(iov)
        vec[i].hdr.iovlen = 1
    fn = libc.sendmmsg if send else libc.recvmmsg
    args = (sock.fileno(), vec, count, 0) if send else (sock.fileno(), vec, count, 0x40, None)  # MSG_DONTWAIT
    moved = int(fn(*args))
    if moved < 0:
        raise OSError(ctypes.get_errno(), "mmsg")
    return moved


@pytest.mark.matrix
@pytest.mark.parametrize("source", ["kernel functions", "system calls"])
def test_sendmsg_and_mmsg_calls_are_records_and_what_is_not_followed_is_counted(source: str) -> None:
    """The sources before Linux 6.3 (forced here where they are not needed): a
    sendmsg/recvmsg pair, then a sendmmsg and a recvmmsg of 40 messages each. The UDP
    functions run once per message: 40 records each. The system calls' program follows the
    first 32 of a call's messages and counts the other 8 lost (generated - lost = recorded)."""
    with netns_lab() as ns, tracing(("udp-calls",), netns=ns.inode, udp_call_source=source) as cap:
        got = chosen_source(source, cap)
        before = cap.session.counters().sum(axis=0)[:, layout.EV_UDP]
        with ns.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, ns.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            rx.bind(("127.0.0.1", 0))
            port = rx.getsockname()[1]
            tx.sendmsg([b"hel", b"lo"], [], 0, ("127.0.0.1", port))
            sport = tx.getsockname()[1]
            assert rx.recvmsg(100)[0] == b"hello"
            tx.connect(("127.0.0.1", port))
            assert mmsg(tx, 40, 7, send=True) == 40
            assert mmsg(rx, 40, 7, send=False) == 40
        after = cap.session.counters().sum(axis=0)[:, layout.EV_UDP]
        records = cap.settle(quiet=0.5)
    found = calls(records, port)
    functions = got == "kernel functions"  # udp_sendmsg/udp_recvmsg run once per message
    hook = "fexit/udp_%s" if functions else "tp_btf/sys_exit:%s"
    follows = 40 if functions else 32
    send_msg, recv_msg = hook % "sendmsg", hook % "recvmsg"
    send_mmsg, recv_mmsg = (send_msg, recv_msg) if functions else (hook % "sendmmsg", hook % "recvmmsg")
    singles = [c for c in found if c[5] == 5]
    assert singles == sorted(
        [("send", "0.0.0.0", sport, "127.0.0.1", port, 5, send_msg),
         ("receive", "127.0.0.1", port, "127.0.0.1", sport, 5, recv_msg)],
        key=str,
    )  # fmt: skip
    sent = [c for c in found if c[5] == 7 and c[0] == "send"]
    received = [c for c in found if c[5] == 7 and c[0] == "receive"]
    assert sent == [("send", "127.0.0.1", sport, "127.0.0.1", port, 7, send_mmsg)] * follows
    # no name asked: the system call's caller gets none; the function still writes the
    # sender's address into the kernel's own buffer (___sys_recvmsg), and it is taken
    peer = ("127.0.0.1", sport) if functions else (None, None)
    assert received == [("receive", "127.0.0.1", port, *peer, 7, recv_mmsg)] * follows
    generated, lost = after - before
    assert (generated, lost) == (2 + 40 + 40, 2 * (40 - follows))
    assert generated - lost == len(found)


@pytest.mark.matrix
def test_a_kernel_that_refuses_the_functions_programs_gets_the_system_calls_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The UDP functions' fexit programs refused at load, on every kernel: udp_recvmsg's is
    pointed at udp_sendmsg, which has no sixth argument for it to take its return value from
    (the verifier refuses that where fexit loads at all; this host refuses fexit itself), and
    the prototypes are taken to match (5.10's and 6.18's do not). The session loads again
    with the system calls' program, whose records come, and says why in `degraded`."""
    monkeypatch.setattr(loader, "functions_match", lambda: True)
    configure = loader.KernelSession.configure
    retarget = libbpf.get().lib.bpf_program__set_attach_target
    retarget.restype, retarget.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p]

    def misdirected(session: loader.KernelSession) -> None:
        configure(session)
        assert retarget(session._find_program("udp_recvmsg"), 0, b"udp_sendmsg") == 0

    monkeypatch.setattr(loader.KernelSession, "configure", misdirected)
    with netns_lab() as ns, tracing(("udp-calls",), netns=ns.inode, udp_call_source="kernel functions") as cap:
        assert cap.session.udp_call_source() == "system calls"
        assert set(loader.SYSCALL_PROGRAMS) <= set(cap.session.links)
        assert not set(loader.FUNCTION_PROGRAMS) & set(cap.session.loaded_names())
        [why] = [w for p, what, w in cap.session.degraded if (p, what) == ("udp-calls", "udp_call.kernel_functions")]
        assert why.startswith("this kernel refused the fexit programs") and why.endswith("about 3% more CPU per byte")
        # the program named is udp_recvmsg where fexit loads; here, the first fexit program
        assert "(program udp_recvmsg)" in why or kernel_expect.fexit_refused() is not None, why
        with ns.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            tx.sendto(b"seen", ("127.0.0.1", 9))
            sport = tx.getsockname()[1]
        records = cap.settle(quiet=0.5)
    assert calls(records, sport) == [("send", "0.0.0.0", sport, "127.0.0.1", 9, 4, "tp_btf/sys_exit:sendto")]


@pytest.mark.matrix
def test_a_32_bit_call_is_never_taken_for_one_of_the_six(tmp_path: Path) -> None:
    """The system calls' source reads the call's number and arguments from the registers; a
    32-bit call's numbers mean other calls (getgid is 47, recvmsg's number on x86-64). A
    process makes such a call with a UDP socket's fd where recvmsg's would be, then a real
    sendto: only the sendto is recorded."""
    if platform.machine() != "x86_64" or shutil.which("gcc") is None:
        pytest.fail("needs x86-64 and gcc (scripts/install-system)")
    program = tmp_path / "compat_call"
    subprocess.run(["gcc", "-O2", "-o", str(program), str(Path(__file__).with_name("compat_call.c"))], check=True)
    with netns_lab() as ns, tracing(("udp-calls",), netns=ns.inode, udp_call_source="system calls") as cap:
        sport = int(ns.run(str(program)))
        records = cap.settle(quiet=0.5)
    assert [r for r in records if isinstance(r, (UdpDatagram, SockEvent))] == [
        r for r in records if isinstance(r, UdpDatagram) and r.sport == sport
    ]
    assert calls(records, sport) == [("send", "0.0.0.0", sport, "127.0.0.1", 9, 1, "tp_btf/sys_exit:sendto")]

"""Kernel tests of the in-kernel filters (port, address, pid, cgroup, netns), set before load."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys

import pytest

from tests.kernel_support import bound_listener, kernel, tracing

pytestmark = kernel


def connect_once(lst: socket.socket) -> None:
    family = lst.family
    host, port = lst.getsockname()[:2]
    with socket.socket(family) as c:
        c.connect((host, port))
        a, _ = lst.accept()
        c.sendall(b"f")
        a.recv(1)
        a.close()


def own_cgroup_id() -> int:
    path = open("/proc/self/cgroup").read().strip().split("::", 1)[-1]
    return os.stat(f"/sys/fs/cgroup{path}").st_ino


def test_a_port_filter_keeps_that_port_and_drops_other_traffic() -> None:
    wanted, other = bound_listener(), bound_listener()
    port = wanted.getsockname()[1]
    with tracing(("tcp",), port=port) as cap:
        wanted.listen()
        other.listen()
        connect_once(other)
        connect_once(wanted)
        records = cap.settle(quiet=0.3)
    assert records
    assert all(port in (r.sport, r.dport) for r in records)  # type: ignore[attr-defined]
    assert {r.state for r in records if r.kind == "tcp_state"} >= {"LISTEN", "SYN_SENT", "ESTABLISHED"}  # type: ignore[attr-defined]


def test_an_address_filter_keeps_ipv6_loopback_and_drops_ipv4() -> None:
    v6, v4 = bound_listener("::1"), bound_listener("127.0.0.1")
    with tracing(("tcp",), addr=ipaddress.ip_address("::1")) as cap:
        v6.listen()
        v4.listen()
        connect_once(v4)
        connect_once(v6)
        records = cap.settle(quiet=0.3)
    mine = [r for r in records if v6.getsockname()[1] in (r.sport, r.dport)]  # type: ignore[attr-defined]
    assert mine and all(r.ip_ver == 6 for r in mine)  # type: ignore[attr-defined]
    assert all("::1" in (r.src, r.dst) for r in records)  # type: ignore[attr-defined]


def test_a_pid_filter_keeps_this_process_and_drops_another_on_the_same_port() -> None:
    lst = bound_listener()
    port = lst.getsockname()[1]
    with tracing(("tcp",), pid=os.getpid(), port=port) as cap:
        lst.listen()
        code = f"import socket; s = socket.create_connection(('127.0.0.1', {port})); s.recv(1); s.close()"
        child = subprocess.Popen([sys.executable, "-c", code])
        a, _ = lst.accept()
        a.sendall(b"p")
        a.close()
        assert child.wait(timeout=10) == 0
        records = cap.settle(quiet=0.3)
    assert records
    assert {r.tgid for r in records} == {os.getpid()}
    assert child.pid not in {r.tgid for r in records}


@pytest.mark.parametrize(
    ("which", "matches"),
    [("cgroup", True), ("cgroup", False), ("netns", True), ("netns", False)],
)
def test_cgroup_and_netns_filters_match_only_their_own(which: str, matches: bool) -> None:
    own = own_cgroup_id() if which == "cgroup" else os.stat("/proc/self/ns/net").st_ino
    lst = bound_listener()
    port = lst.getsockname()[1]
    with tracing(("tcp",), port=port, **{which: own if matches else own + 1}) as cap:
        lst.listen()
        connect_once(lst)
        records = cap.settle(quiet=0.3)
    states = [r for r in records if r.kind == "tcp_state"]
    assert bool(states) is matches

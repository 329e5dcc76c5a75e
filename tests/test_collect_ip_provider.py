"""Kernel tests of the ip provider: send records match what tcpdump saw, IPv4 and IPv6 on loopback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from tests.kernel_support import bound_listener, cookie_of, kernel, tracing
from tests.loopback_capture import pcap_count, wait_captured
from translators.records import IpPacket

pytestmark = kernel


def start_tcpdump(path: Path, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            "tcpdump",
            "-i",
            "lo",
            "--immediate-mode",
            "-B",
            "32768",
            "-s",
            "96",
            "-U",
            "-n",
            "-w",
            str(path),
            f"port {port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline().decode()  # "listening on lo, ..." once the socket is open
    assert "listening" in line, line
    return proc


@pytest.mark.skipif(
    not os.path.exists("/usr/bin/tcpdump") and not os.path.exists("/usr/sbin/tcpdump"), reason="needs tcpdump"
)
# the kernel matrix runs the IPv4 case only (each case is a load: a minute under QEMU's TCG)
@pytest.mark.parametrize("host", [pytest.param("127.0.0.1", marks=pytest.mark.matrix), "::1"])
def test_ip_send_records_of_a_flow_equal_the_packets_tcpdump_saw(host: str, tmp_path: Path) -> None:
    lst = bound_listener(host)
    port = lst.getsockname()[1]
    pcap = tmp_path / "flow.pcap"
    dump = start_tcpdump(pcap, port)
    try:
        with tracing(("ip",), port=port) as cap:
            lst.listen()
            client = socket.create_connection((host, port))
            server, _ = lst.accept()
            cookie = cookie_of(client)
            got = 0
            for _ in range(20):
                client.sendall(b"i" * 3000)
                got += len(server.recv(65536))
            client.close()
            while chunk := server.recv(65536):  # the rest, then EOF
                got += len(chunk)
            assert got == 60000
            server.close()
            lst.close()
            records = cap.settle(quiet=0.5)
        wait_captured(pcap, sum(isinstance(r, IpPacket) and r.probe == "send" for r in records))
    finally:
        dump.send_signal(signal.SIGINT)
        _, err = dump.communicate(timeout=10)
    assert b" packets captured" in err, err
    sends = [r for r in records if isinstance(r, IpPacket) and r.probe == "send"]
    receives = [r for r in records if isinstance(r, IpPacket) and r.probe == "receive"]
    assert len(sends) == pcap_count(pcap) > 40, err
    assert len(receives) == len(sends)  # loopback: everything sent is received
    version = 6 if ":" in host else 4
    assert {(r.ip_ver, r.if_name, r.if_local, r.protocol_name) for r in sends} == {(version, "lo", True, "TCP")}
    mine = [r for r in sends if r.sock_cookie == cookie]
    assert mine and all(r.pid == os.getpid() and r.src == host and r.dport == port for r in mine)
    assert all(r.ttl == 64 and r.length and r.header_length == (20 if version == 4 else 40) for r in sends)
    assert all(r.conn_uuid is None and r.pid is None for r in receives)  # no socket before IP input


def test_a_tso_send_over_veth_records_each_skb_with_its_gso_size_and_segment_count() -> None:
    """veth keeps TSO on (no GRO lab): the sender's skbs reach net_dev_queue whole, each
    standing for gso_segs wire segments of gso_size (the MSS) bytes."""
    from tests.veth_lab import veth_lab

    total = 1 << 18
    with veth_lab(gro=False) as lab:
        lst = lab.socket(lab.b, socket.AF_INET, socket.SOCK_STREAM)
        lst.bind((lab.addr_b, 0))
        lst.listen()
        port = lst.getsockname()[1]
        with tracing(("ip",), port=port) as cap:
            client = lab.socket(lab.a, socket.AF_INET, socket.SOCK_STREAM)
            client.connect((lab.addr_b, port))
            server, _ = lst.accept()
            mss = client.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
            client.sendall(b"g" * total)
            got = 0
            while got < total:
                got += len(server.recv(1 << 20))
            lport = client.getsockname()[1]
            records = cap.settle(quiet=0.3)
            for s in (client, server, lst):
                s.close()
    data = [
        r
        for r in records
        if isinstance(r, IpPacket)
        and r.probe == "send"
        and r.sport == lport
        and (r.payload_length or 0) > 40  # data, not SYN (40) or ACK (32)
    ]
    tso = [r for r in data if (r.gso_segs or 0) > 1]
    assert tso, [(r.length, r.gso_segs, r.gso_size) for r in data]
    assert {r.gso_size for r in tso} == {mss}
    # every payload byte once: the TCP header is 32 bytes (timestamps) in each skb
    assert sum(r.payload_length - 32 for r in data) == total  # type: ignore[operator]
    for r in tso:
        assert r.gso_segs == -(-(r.payload_length - 32) // mss)  # type: ignore[operator]

"""Translators of issue 16 item 3 ("every record true"): exact struct bytes in, exact fields out.
The ip length when the header cannot hold it, later fragments without ports, a failed UDP
call as a sock_event, a loss probe's retransmission as `tlp`. The kernel tests
(tests/test_collect_ip_lengths.py, _ip_fragments.py, _udp_icmp.py, _retrans_kinds.py) check
the same against real traffic."""

from __future__ import annotations

import errno
import socket

import pytest

from collector.bpf import layout
from tests.test_translators_kernel import V4, event, translate
from translators import kernel
from translators.ip import ip_length

V6 = {"family": 10, "saddr": socket.inet_pton(socket.AF_INET6, "fd00::1"), "daddr": socket.inet_pton(socket.AF_INET6, "fd00::2"),
      "sport": 40000, "dport": 80}  # fmt: skip


@pytest.fixture(autouse=True)
def validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel, "VALIDATE", True)


@pytest.mark.parametrize(
    ("version", "length", "skb_len", "expected"),
    [
        (4, 1500, 1500, 1500),  # the header says it
        (4, 0, 65536, 65536),  # a 64 KiB loopback skb: total length 0
        (4, 0, 185000, 185000),  # BIG TCP
        (6, 1500, 1500, 1500),
        (6, (65496 + 40) & 0xFFFF, 65536, 65536),  # payload length + 40 wrapped over 16 bits
        (6, 40, 185000, 185000),  # a jumbo payload length (0)
    ],
)
def test_the_ip_length_is_the_headers_unless_it_cannot_hold_it(
    version: int, length: int, skb_len: int, expected: int
) -> None:
    assert ip_length(version, length, skb_len) == expected


def test_a_big_tcp_send_record_has_the_skbs_length() -> None:
    [rec] = translate(event(layout.EV_IP, **V4, direction=1, version=4, header_length=20, protocol=6,
                            length=0, skb_len=185000, gso_segs=3, gso_size=65483))  # fmt: skip
    assert (rec.length, rec.payload_length, rec.approx) == (185000, 184980, ["length", "payload_length"])  # type: ignore[attr-defined]


def test_a_later_ipv4_fragment_has_no_ports() -> None:
    # offset 185 * 8 = 1480 bytes, MF set; the kernel's header has the datagram's ports (frag_ports)
    [rec] = translate(event(layout.EV_IP, **V4, direction=0, version=4, header_length=20, protocol=17,
                            length=1500, skb_len=1500, frag_off=0x2000 | 185))  # fmt: skip
    assert (rec.is_fragment, rec.frag_offset, rec.sport, rec.dport) == (True, 1480, None, None)  # type: ignore[attr-defined]


def test_a_first_ipv4_fragment_keeps_its_ports() -> None:
    [rec] = translate(event(layout.EV_IP, **V4, direction=0, version=4, header_length=20, protocol=17,
                            length=1500, skb_len=1500, frag_off=0x2000))  # fmt: skip
    assert (rec.is_fragment, rec.frag_offset, rec.sport, rec.dport) == (True, 0, 40000, 80)  # type: ignore[attr-defined]


def test_a_later_ipv6_fragment_has_no_ports() -> None:
    # fragment header: next header UDP, offset 1448 (181 << 3), M bit set, identification 7
    ext = bytes([17, 0]) + ((181 << 3) | 1).to_bytes(2, "big") + (7).to_bytes(4, "big")
    [rec] = translate(event(layout.EV_IP, **V6, direction=0, version=6, header_length=40, protocol=44,
                            length=1496, skb_len=1496, ext=ext.ljust(48, b"\0")))  # fmt: skip
    assert (rec.protocol, rec.is_fragment, rec.frag_offset, rec.sport, rec.dport) == (17, True, 1448, None, None)  # type: ignore[attr-defined]


def test_a_failed_udp_send_call_is_a_send_error_not_a_datagram() -> None:
    [rec] = translate(event(layout.EV_UDP, **V4, call=1, direction=1, protocol=17, ret=-errno.ECONNREFUSED))
    assert (rec.kind, rec.provider, rec.probe, rec.hook) == (
        "sock_event",
        "udp",
        "send-error",
        "tp_btf/sock_send_length",
    )
    assert (rec.proto, rec.rc, rec.sk_err, rec.dport) == ("udp", -errno.ECONNREFUSED, errno.ECONNREFUSED, 80)  # type: ignore[attr-defined]


def test_a_call_on_an_unconnected_socket_has_no_remote_end() -> None:
    unconnected = {**V4, "daddr": bytes(4), "dport": 0}
    [rec] = translate(event(layout.EV_UDP, **unconnected, call=1, direction=1, protocol=17, ret=100))
    assert (rec.kind, rec.probe, rec.bytes, rec.src, rec.dst, rec.dport) == (
        "udp_datagram",
        "send",
        100,
        "10.0.0.1",
        None,
        None,
    )  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("ca_state", "timer", "kind"),
    [(0, 5, "tlp"), (2, 5, "tlp"), (3, 5, "fast"), (4, 5, "rto"), (4, 1, "rto"), (0, 1, "unknown"), (0, 0, "unknown")],
)
def test_a_retransmission_inside_a_loss_probe_is_a_tlp(ca_state: int, timer: int, kind: str) -> None:
    [rec] = translate(event(layout.EV_RETRANSMIT, **V4, seq=1000, end_seq=1777, segs=1, tcp_flags=0x18, state=1,
                            ca_state=ca_state, timer=timer))  # fmt: skip
    assert rec.retrans_kind == kind  # type: ignore[attr-defined]

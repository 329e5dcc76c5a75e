"""translators/ip6ext.walk: IPv6 extension-header chains over the bytes the kernel copied."""

from __future__ import annotations

from translators.ip6ext import EXT_HEADERS, MAX_HEADERS, walk

UDP_HEADER = bytes.fromhex("1f90 0035 0010 abcd")  # 8080 -> 53, length 16, checksum


def opts(next_header: int, units: int = 0) -> bytes:
    return bytes([next_header, units]) + bytes(6 + 8 * units)


def test_hop_by_hop_then_destination_options_end_in_udp_with_its_ports() -> None:
    chain = walk(0, opts(60) + opts(17, units=1) + UDP_HEADER)
    assert (chain.protocol, chain.header_length, chain.ports, chain.complete) == (17, 40 + 8 + 16, (8080, 53), True)
    assert chain.l4[:8] == UDP_HEADER and chain.fragment_offset is None


def test_a_first_fragment_has_ports_and_a_later_one_has_none() -> None:
    first = walk(44, bytes([6, 0, 0x00, 0x01]) + bytes(4) + UDP_HEADER)
    assert (first.protocol, first.header_length, first.ports) == (6, 48, (8080, 53))
    assert (first.fragment_offset, first.more_fragments) == (0, True)
    later = walk(44, bytes([17, 0, 0x00, 0xB8]) + bytes(4) + UDP_HEADER)  # offset 23 * 8
    assert (later.protocol, later.ports, later.fragment_offset, later.more_fragments) == (17, None, 184, False)


def test_a_chain_longer_than_the_copied_bytes_is_incomplete() -> None:
    chain = walk(0, opts(43, units=7))  # 64 bytes claimed, 64 copied, the routing header is past them
    assert (chain.protocol, chain.header_length, chain.complete, chain.ports) == (43, 104, False, None)
    short = walk(60, opts(17, units=2)[:20])
    assert (short.protocol, short.complete, short.ports) == (17, False, None)


def test_a_hostile_chain_of_options_headers_stops_at_the_bound() -> None:
    chain = walk(60, opts(60) * 12)
    assert chain.protocol in EXT_HEADERS and chain.complete is False
    assert chain.header_length == 40 + 8 * MAX_HEADERS


def test_a_packet_without_extension_headers_is_its_own_protocol() -> None:
    chain = walk(17, UDP_HEADER)
    assert (chain.protocol, chain.header_length, chain.ports) == (17, 40, (8080, 53))

"""What the capture analysis reads from a decoded packet batch, whichever decoder made it.

Two decoders produce decoded batches: translators/packet.py (numpy columns, for big
captures and live capture) and translators/packet_rows.py (Python lists, for small
captures, which then start without importing numpy; issue 17 item 7). Both results
satisfy :class:`PacketView`, and the consumers (analysis/flows/capture_flows.py,
translators/packet_records.py) use nothing else, so one pipeline and one set of record
types serve both. tests/test_packet_rows.py proves the two decoders agree.

Column names for :meth:`PacketView.value`: kind, ip_ver, src, dst (IPv4 only; IPv6
addresses are in ``v6``), sport, dport, seq, ack, flags, window, payload, ip_len,
fragment, l3, l4, hlen, thl, proto, ulen, frag_off. A column's value is meaningful only
for the packets whose kind uses it (the TCP fields for TCP packets, ...); the sport of an
ICMP packet is its type and code (type << 8 | code) and its payload the message after
the 8-byte header, which a batch handed to another process (packet_decoded.portable)
keeps while its bytes stay behind.

Keep in sync with: translators/packet_decoded.py (Decoded), translators/packet_rows.py
(RowsDecoded).
"""

from __future__ import annotations

from typing import Any, Protocol

from translators.packet_layers import IcmpQuote, TcpOptions


class PacketView(Protocol):
    """One decoded batch: per-packet values by index (0 .. n-1), batch totals, the TCP columns."""

    n: int
    v6: dict[int, tuple[int, int]]  # packet index -> (src, dst) of IPv6 packets (V6_MARK set)
    option_map: dict[int, TcpOptions]  # packet index -> parsed TCP options (where parsed)
    icmp: dict[int, IcmpQuote]  # packet index -> the flow an ICMP unreachable quotes
    reasons: dict[int, str]  # why a malformed packet is, or what a non-IP packet was

    @property
    def buf(self) -> bytes | bytearray: ...

    @property
    def first_frame(self) -> int: ...

    def value(self, name: str, i: int) -> int: ...

    def ts_at(self, i: int) -> int: ...

    def frame_end(self, i: int) -> int: ...

    def file_offset(self, i: int) -> int: ...

    def caplen_total(self) -> int: ...

    def wirelen_total(self) -> int: ...

    def count_kind(self, kind: int) -> int: ...

    def count_fragments(self) -> int: ...

    def not_kind(self, kind: int) -> list[int]: ...

    def tcp_columns(self) -> tuple[list[Any], ...]: ...

    # per-packet lists (IPv6 addresses substituted in src/dst)
    @property
    def kind(self) -> list[int]: ...

    @property
    def ip_ver(self) -> list[int]: ...

    @property
    def frame(self) -> list[int]: ...

    @property
    def ts_ns(self) -> list[int]: ...

    @property
    def wire_len(self) -> list[int]: ...

    @property
    def src(self) -> list[int]: ...

    @property
    def dst(self) -> list[int]: ...

    @property
    def sport(self) -> list[int]: ...

    @property
    def dport(self) -> list[int]: ...

    @property
    def seq(self) -> list[int]: ...

    @property
    def ack(self) -> list[int]: ...

    @property
    def flags(self) -> list[int]: ...

    @property
    def window(self) -> list[int]: ...

    @property
    def payload(self) -> list[int]: ...

    @property
    def ip_len(self) -> list[int]: ...

    @property
    def fragment(self) -> list[int]: ...

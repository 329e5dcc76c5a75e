"""A capture for the Captures page's browser tests, written with scapy: a bulk transfer
10.7.0.1:41000 -> 10.7.0.2:80 with one retransmitted segment and SACKs, 25 refused
connects to 10.7.0.2:9100 (K14 connect failures) and refused connects to 21 more
ports (K9 port scan). Keep in sync with: test_dashboard_captures.py.
"""

from __future__ import annotations

from pathlib import Path

from scapy.layers.inet import IP, TCP
from scapy.utils import wrpcap

T0 = 1_796_000_000.0
MSS = 1000
SEGMENTS = 20
RETRANSMITTED = 7  # this data segment is lost once and sent again
REFUSED_SERVICE = 25  # connects to :9100
SCANNED_PORTS = 21  # one connect each to :9001..:9021


def write_story_capture(path: Path) -> Path:
    c, s = IP(src="10.7.0.1", dst="10.7.0.2"), IP(src="10.7.0.2", dst="10.7.0.1")
    isn, peer = 1000, 5000
    pkts = [
        c / TCP(sport=41000, dport=80, flags="S", seq=isn, options=[("MSS", MSS), ("SAckOK", b"")]),
        s / TCP(sport=80, dport=41000, flags="SA", seq=peer, ack=isn + 1, options=[("MSS", MSS), ("SAckOK", b"")]),
        c / TCP(sport=41000, dport=80, flags="A", seq=isn + 1, ack=peer + 1),
    ]
    payload = b"x" * MSS
    for i in range(SEGMENTS):
        seq = isn + 1 + i * MSS
        pkts.append(c / TCP(sport=41000, dport=80, flags="PA", seq=seq, ack=peer + 1) / payload)
        if i == RETRANSMITTED:
            continue  # lost: the receiver acks the hole and SACKs what follows
        if i > RETRANSMITTED and i <= RETRANSMITTED + 3:
            hole = isn + 1 + RETRANSMITTED * MSS
            sack = [("SAck", (hole + MSS, seq + MSS))]
            pkts.append(s / TCP(sport=80, dport=41000, flags="A", seq=peer + 1, ack=hole, options=sack))
            if i == RETRANSMITTED + 3:
                pkts.append(c / TCP(sport=41000, dport=80, flags="PA", seq=hole, ack=peer + 1) / payload)
                pkts.append(s / TCP(sport=80, dport=41000, flags="A", seq=peer + 1, ack=seq + MSS))
            continue
        pkts.append(s / TCP(sport=80, dport=41000, flags="A", seq=peer + 1, ack=seq + MSS))
    end = isn + 1 + SEGMENTS * MSS
    pkts += [
        c / TCP(sport=41000, dport=80, flags="FA", seq=end, ack=peer + 1),
        s / TCP(sport=80, dport=41000, flags="FA", seq=peer + 1, ack=end + 1),
        c / TCP(sport=41000, dport=80, flags="A", seq=end + 1, ack=peer + 2),
    ]
    refused = [9100] * REFUSED_SERVICE + list(range(9001, 9001 + SCANNED_PORTS))
    for n, port in enumerate(refused):
        sport = 42000 + n
        pkts.append(c / TCP(sport=sport, dport=port, flags="S", seq=7000 + n))
        pkts.append(s / TCP(sport=port, dport=sport, flags="RA", seq=0, ack=7001 + n))
    for i, p in enumerate(pkts):
        p.time = T0 + i * 0.005
    wrpcap(str(path), pkts)
    return path

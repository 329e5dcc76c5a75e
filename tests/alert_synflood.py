"""A SYN flood for tests/test_alerts_capture.py: `python tests/alert_synflood.py RATE SECONDS`
sends pure SYNs from spoofed 10.66.x.y sources to 127.0.0.1:8088 at RATE per second
through a raw socket (run it inside the test's network namespace, as root). Prints the
number of SYNs sent. Bounded by SECONDS.
"""

from __future__ import annotations

import socket
import struct
import sys
import time


def csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def syn(src: str, sport: int, dst: str, dport: int, seq: int) -> bytes:
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, 0x02, 64240, 0, 0)
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", csum(pseudo + tcp)) + tcp[18:]
    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), seq & 0xFFFF, 0, 64, 6, 0, socket.inet_aton(src), socket.inet_aton(dst)
    )
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return ip + tcp


def main(rate: int, seconds: float) -> int:
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    start = time.monotonic()
    n = 0
    while (elapsed := time.monotonic() - start) < seconds:
        while n < int(elapsed * rate):
            src = f"10.66.{(n >> 8) & 255}.{n & 255}"
            raw.sendto(syn(src, 1024 + n % 60000, "127.0.0.1", 8088, (n * 7919) & 0xFFFFFFFF), ("127.0.0.1", 0))
            n += 1
        time.sleep(0.01)
    raw.close()
    return n


if __name__ == "__main__":
    print(main(int(sys.argv[1]), float(sys.argv[2])))

"""The six stories of issue 18, as traffic inside the test's network namespace (run there
by test_dashboard_stories_kernel.py with `ip netns exec NS python tests/browser/story_traffic.py`):
a bulk transfer with 10 % loss on port 7600 (the namespace's nftables rule), a receiver
that never reads (zero window, port 7500), refused connects (25 to port 9, one each to
15 more), 60 short connections to port 7950 closed by the client first (its sockets sit
in TIME_WAIT), 44 UDP datagrams to the closed port 7011, and a 1 s download on 7800.
Prints one JSON line of facts (the download's byte count). Every loop is bounded.
"""

from __future__ import annotations

import faulthandler
import json
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.alert_traffic import bulk, closed_ports, listener, slow_reader, udp_closed  # noqa: E402

HOST = "127.0.0.1"
SHORT_PORT = 7950
SHORT = 60
UDP_PORT = 7011
UDP_DATAGRAMS = 44
DOWNLOAD_PORT = 7800
LOSSY_PORT = 7600
SLOW_PORT = 7500


def short_connections() -> None:
    srv = listener(SHORT_PORT)
    for _ in range(SHORT):
        cli = socket.create_connection((HOST, SHORT_PORT))
        conn, _ = srv.accept()
        cli.sendall(b"ping")
        assert conn.recv(4) == b"ping"
        cli.close()  # the active closer: its socket waits in TIME_WAIT
        conn.close()
    srv.close()


def main() -> None:
    faulthandler.dump_traceback_later(90, exit=True)
    bulk(LOSSY_PORT, 2.5)
    slow_reader(SLOW_PORT)
    closed_ports()
    short_connections()
    udp_closed(UDP_PORT, UDP_DATAGRAMS)
    downloaded = bulk(DOWNLOAD_PORT, 1.0)
    print(json.dumps({"downloaded": downloaded}))


if __name__ == "__main__":
    main()

"""Both ends of one loopback TCP connection traced by the real collector: each end's page and API
row say what its own socket sent (out) and received (in), the passive end included.

`nettrail collect --providers tcp,siftr --filter port=P --out FILE` (flow_counters come with siftr, as under `nettrail up`) traces a transfer of known sizes
each way (SENT bytes client -> server, REPLY bytes back); its records are stored through the
ingest storage path (store_batch) and read back through /api/connections and the dashboard's
connection API.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.collect_process import Collector
from tests.kernel_support import bound_listener, kernel
from translators.records import Record, from_json
from webapp.traces.store import store_batch

SENT = 1_000_000
REPLY = 4321
pytestmark = [*kernel, pytest.mark.django_db]


def read_exactly(sock: socket.socket, size: int) -> int:
    got = 0
    while got < size and (chunk := sock.recv(min(65536, size - got))):
        got += len(chunk)
    return got


def transfer(listener: socket.socket) -> None:
    """SENT bytes to the server, which reads them all and answers REPLY bytes; then both close."""
    port = listener.getsockname()[1]
    listener.listen(1)
    got: list[int] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            got.append(read_exactly(conn, SENT))
            conn.sendall(b"r" * REPLY)
            read_exactly(conn, 1)  # the client's close (EOF)

    server = threading.Thread(target=serve)
    server.start()
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(b"s" * SENT)
        reply = read_exactly(client, REPLY)
    server.join(10)
    assert (got, reply) == ([SENT], REPLY)


def retransmitted_bytes(viewer: Client, row: dict[str, Any]) -> int:
    """The payload bytes the row's socket retransmitted, from its connection page."""
    page = viewer.get(f"/api/dash/connections/{row['conn_uuid']}", {"host": row["host_id"]}).json()["conn"]
    return int(page["retrans_bytes_out"])


def read_records(path: Path) -> list[Record]:
    return [from_json(line) for line in path.read_text().splitlines() if line.strip()]


def test_each_end_of_a_loopback_transfer_shows_its_own_sent_and_received(tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    listener = bound_listener()
    port = listener.getsockname()[1]
    args = ["--providers", "tcp,siftr", "--ppl", "1", "--filter", f"port={port}", "--flow-interval", "0.5"]
    with listener, Collector(*args, "--out", str(out)) as collector:
        collector.wait_attached()
        transfer(listener)
        time.sleep(1.0)  # a flow interval: the closed sockets' final counters are read
        status, _, err = collector.stop()
    assert status == 0, err
    records = read_records(out)
    for start in range(0, len(records), 5000):
        store_batch(records[start : start + 5000])

    viewer = Client()
    viewer.force_login(get_user_model().objects.create_user("viewer", password="not-used-here"))
    rows = viewer.get("/api/connections", {"port": port}).json()["connections"]
    rows = [row for row in rows if row["dport"]]  # not the listening socket
    by_side = {("server" if row["sport"] == port else "client"): row for row in rows}
    assert sorted(by_side) == ["client", "server"], rows
    client, server = by_side["client"], by_side["server"]
    # Each row says what its own socket sent and received, the passive end's not swapped: its
    # tcp_info counters (ss -tin), so bytes in are ss's bytes_received, in which the peer's FIN
    # counts one, and bytes out ss's bytes_sent, retransmitted payload included.
    assert (server["bytes_in"], client["bytes_in"]) == (SENT + 1, REPLY + 1)
    assert client["bytes_out"] == SENT + retransmitted_bytes(viewer, client)
    assert server["bytes_out"] == REPLY + retransmitted_bytes(viewer, server)
    assert client["bytes_out"] > 100 * client["bytes_in"]  # the client is the sender
    # Packets: each row holds its own socket's kernel counts, unswapped.
    finals = {r.sock_cookie: r for r in records if r.kind == "flow_counters"}  # the last report wins
    for row in (client, server):
        (mine,) = [f for f in finals.values() if f.conn_uuid == row["conn_uuid"]]
        assert (row["packets_out"], row["packets_in"]) == (mine.packets_out, mine.packets_in)
        assert (row["bytes_out"], row["bytes_in"]) == (mine.bytes_out, mine.bytes_in)
        assert mine.packets_out > 0 and mine.packets_in > 0
    page = viewer.get(f"/api/dash/connections/{server['conn_uuid']}", {"host": server["host_id"]}).json()["conn"]
    assert (page["bytes_out"], page["bytes_in"]) == (REPLY, server["bytes_in"])

"""Zeek sink: `nettrail collect --zeek` writes live connection summaries as Zeek's conn.log.

Only `connection` records (one per TCP socket, at tcp_destroy_sock) become lines; every
other kind is left out, as conn.log holds connections only, except that a socket's
tcp_state records tell whether this host opened it: an accepted connection is written
with the remote side as the originator, as its conn_state and history have it. The header is written when
the sink opens, each batch is flushed as it is written (so `tail -f` and pipes see the
connections as they end), and `#close` is written when the collector stops.
Keep in sync with: xo/zeek.py (the format), docs/collector.md.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO

from translators.kernel import KernelRecord, WireRow, as_struct
from translators.records import Connection
from xo.zeek import ZeekConnWriter

MAX_SOCKETS = 200_000


def _field(rec: KernelRecord, name: str) -> Any:
    return rec[name] if isinstance(rec, dict | WireRow) else getattr(rec, name)


class ZeekSink:
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.writer = ZeekConnWriter(self.stream)
        self.active: dict[int, bool] = {}  # socket cookie -> this host opened it
        self.stream.flush()

    def write(self, records: Iterable[KernelRecord]) -> None:
        wrote = False
        for rec in records:
            kind = rec["kind"] if isinstance(rec, dict) else rec.kind
            if kind == "tcp_state":
                active, cookie = (_field(rec, "active"), _field(rec, "sock_cookie"))
                if active is not None and cookie:
                    if len(self.active) >= MAX_SOCKETS:
                        self.active.clear()  # sockets whose summary never came (tcp provider off)
                    self.active[cookie] = active
                continue
            if kind != "connection":
                continue
            conn = as_struct(rec)
            assert isinstance(conn, Connection)
            self.writer.write(conn, self.active.pop(conn.sock_cookie or 0, None))
            wrote = True
        if wrote:
            self.stream.flush()

    def close(self) -> None:
        self.writer.close()

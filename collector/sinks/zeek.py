"""Zeek sink: `nettrail collect --zeek` writes live connection summaries as Zeek's conn.log.

Only `connection` records (one per TCP socket, at tcp_destroy_sock) become lines; every
other kind is left out, as conn.log holds connections only. The header is written when
the sink opens, each batch is flushed as it is written (so `tail -f` and pipes see the
connections as they end), and `#close` is written when the collector stops.
Keep in sync with: xo/zeek.py (the format), docs/collector.md.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TextIO

from translators.kernel import KernelRecord, as_struct
from translators.records import Connection
from xo.zeek import ZeekConnWriter


class ZeekSink:
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.writer = ZeekConnWriter(self.stream)
        self.stream.flush()

    def write(self, records: Iterable[KernelRecord]) -> None:
        wrote = False
        for rec in records:
            kind = rec["kind"] if isinstance(rec, dict) else rec.kind
            if kind != "connection":
                continue
            conn = as_struct(rec)
            assert isinstance(conn, Connection)
            self.writer.write(conn)
            wrote = True
        if wrote:
            self.stream.flush()

    def close(self) -> None:
        self.writer.close()

"""What an HTTP sink holds in memory, kept on disk so that a collector killed outright is counted.

A sink's records wait in memory until they are sent or spooled: those pending (written,
not yet cut into a batch or waiting behind the batch in flight) and the batch in flight
(posted, no answer yet). SIGTERM and Ctrl-C ship or spool them; SIGKILL (or the OOM
killer) ends the process with them. So each sink keeps, beside its spool:

    <spool>/held-<token>.ledger    pid, process start time, records pending, records in flight
    <spool>/held-<token>.inflight  the batch in flight (MessagePack, as posted)

rewritten in place at every change (no fsync: a killed process's writes are in the page
cache; a machine that crashes loses the cache, and with it nothing this ledger could
count). The next sink on the spool claims the ledgers whose process is gone: the batch
in flight goes back into the spool (the server is idempotent on (host, boot, seq), so it
is stored once whether or not its answer was lost), the pending records are reported as
lost (HttpSink.killed_records, a loss_report `killed`). A clean close removes its files.

Keep in sync with: collector/sinks/http.py (the only user) and docs/collector-sinks.md.
"""

from __future__ import annotations

import logging
import os
import secrets
import struct
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("nettrail.sink.held")

MAGIC = b"NTHL"
LEDGER = struct.Struct("<4sIQQQ")  # magic, pid, process start time (clock ticks), pending, in flight
PREFIX = "held-"


@dataclass(frozen=True)
class Claimed:
    """What a killed sink held: `pending` records lost, and its batch in flight."""

    pid: int
    pending: int
    in_flight: int
    payload: bytes | None  # the batch in flight as posted; None if its file is missing


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (tells a reused pid apart), or None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])  # field 22; the command name may hold spaces


class HeldLedger:
    """This sink's ledger: `note()` at every change, `close()` when nothing is held."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        stem = f"{PREFIX}{secrets.token_hex(6)}"
        self.ledger_path = directory / f"{stem}.ledger"
        self.inflight_path = directory / f"{stem}.inflight"
        self._pid = os.getpid()
        self._started = start_time(self._pid) or 0
        self._ledger = os.open(self.ledger_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        self._inflight = os.open(self.inflight_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        self.note(0, 0)

    def note(self, pending: int, in_flight: int) -> None:
        os.pwrite(self._ledger, LEDGER.pack(MAGIC, self._pid, self._started, pending, in_flight), 0)

    def in_flight(self, payload: bytes) -> None:
        """The batch about to be posted: its bytes first, so the ledger never counts a batch it cannot replay."""
        os.pwrite(self._inflight, payload, 0)
        os.ftruncate(self._inflight, len(payload))

    def close(self) -> None:
        for fd in (self._ledger, self._inflight):
            os.close(fd)
        self.ledger_path.unlink(missing_ok=True)
        self.inflight_path.unlink(missing_ok=True)


def claim(directory: Path) -> list[Claimed]:
    """The ledgers in `directory` whose sink's process is gone, removed once read.

    A ledger whose process still runs (same pid and start time) belongs to a live sink on
    the same spool and is left alone."""
    found: list[Claimed] = []
    for path in sorted(directory.glob(f"{PREFIX}*.ledger")):
        try:
            raw = path.read_bytes()
        except OSError:
            continue
        if len(raw) < LEDGER.size or raw[:4] != MAGIC:
            log.error("unreadable sink ledger %s: what its collector held is unknown", path)
            _remove(path)
            continue
        _, pid, started, pending, in_flight = LEDGER.unpack_from(raw)
        if start_time(pid) == started:
            log.warning("spool %s is also used by a running collector (pid %d)", directory, pid)
            continue
        inflight = path.with_suffix(".inflight")
        try:
            payload: bytes | None = inflight.read_bytes() if in_flight else None
        except OSError:
            payload = None
        found.append(Claimed(pid, pending, in_flight, payload))
        _remove(path)
    return found


def _remove(ledger: Path) -> None:
    ledger.unlink(missing_ok=True)
    ledger.with_suffix(".inflight").unlink(missing_ok=True)

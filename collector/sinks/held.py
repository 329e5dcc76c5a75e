"""What an HTTP sink holds in memory, kept on disk so that a collector killed outright is counted.

A sink's records wait in memory until they are sent or spooled: those pending (written,
not yet cut into a batch or waiting behind the batch in flight), the batch in flight
(posted, no answer yet) and, while a slow request holds the sender, a chunk on its way
to the spool (write()'s overflow, inside the spool's fsync). SIGTERM and Ctrl-C ship or
spool them; SIGKILL (or the OOM killer) ends the process with them. So each sink keeps,
beside its spool:

    <spool>/held-<token>.ledger    pid, process start time, records pending, in each slot,
                                   and carried: earlier collectors' lost records not yet reported
    <spool>/held-<token>.inflight  the batch in flight (MessagePack, as posted)
    <spool>/held-<token>.overflow  the chunk being spooled

rewritten in place at every change (no fsync: a killed process's writes are in the page
cache; a machine that crashes loses the cache, and with it nothing this ledger could
count). A slot's bytes are written before the count that says they are there. The next
sink on the spool claims the ledgers whose process is gone: each slot's records go back
into the spool (the server is idempotent on (host, boot, seq), so they are stored once
whether or not an answer was lost or the chunk's own append finished), the pending
records are reported as lost (HttpSink.killed_records, a loss_report `killed`). Until
that report has left memory (sent or spooled) the count stays in the claiming sink's own
ledger as `carried`, so a sink killed before it reported (or closed before anything took
the report) hands the count on instead of losing it. A clean close removes its files, or
keeps the ledger alone while it still carries a count.

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

MAGIC = b"NTH2"
# magic, pid, process start time (clock ticks), records pending, records in each SLOTS, carried
LEDGER = struct.Struct("<4sIQQQQQ")
MAGIC_V1, LEDGER_V1 = b"NTHL", struct.Struct("<4sIQQQQ")  # before `carried` (read, never written)
PREFIX = "held-"
SLOTS = ("inflight", "overflow")  # the batch being posted; write()'s chunk being spooled


@dataclass(frozen=True)
class Claimed:
    """What a killed sink held: `pending` records lost, per slot (count, its bytes; None if
    its file is missing), and `carried`: records lost before it that it had not reported."""

    pid: int
    pending: int
    slots: tuple[tuple[int, bytes | None], ...]
    carried: int = 0


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (tells a reused pid apart), or None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])  # field 22; the command name may hold spaces


class HeldLedger:
    """This sink's ledger: `hold()` a slot's bytes, `note()` the counts at every change,
    `close()` when nothing is held."""

    def __init__(self, directory: Path, carried: int = 0) -> None:
        stem = f"{PREFIX}{secrets.token_hex(6)}"
        self.ledger_path = directory / f"{stem}.ledger"
        self._pid = os.getpid()
        self._started = start_time(self._pid) or 0
        self._ledger = os.open(self.ledger_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC
        self._slots = {slot: os.open(self.ledger_path.with_suffix(f".{slot}"), flags, 0o600) for slot in SLOTS}
        self.carried = carried
        self.note(0, 0, 0)

    def note(self, pending: int, in_flight: int, overflow: int) -> None:
        row = LEDGER.pack(MAGIC, self._pid, self._started, pending, in_flight, overflow, self.carried)
        os.pwrite(self._ledger, row, 0)

    def hold(self, slot: str, payload: bytes) -> None:
        """A slot's bytes, before the count that says they are there (note)."""
        fd = self._slots[slot]
        os.pwrite(fd, payload, 0)
        os.ftruncate(fd, len(payload))

    def close(self) -> None:
        """Nothing is held any more: the files go, but for the ledger while it carries a
        count nobody reported (claimed by the next sink once this process is gone)."""
        if self.carried:
            self.note(0, 0, 0)
        for fd in (self._ledger, *self._slots.values()):
            os.close(fd)
        for slot in SLOTS:
            self.ledger_path.with_suffix(f".{slot}").unlink(missing_ok=True)
        if not self.carried:
            self.ledger_path.unlink(missing_ok=True)


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
        if raw[:4] == MAGIC and len(raw) >= LEDGER.size:
            _, pid, started, pending, *counts, carried = LEDGER.unpack_from(raw)
        elif raw[:4] == MAGIC_V1 and len(raw) >= LEDGER_V1.size:
            (_, pid, started, pending, *counts), carried = LEDGER_V1.unpack_from(raw), 0
        else:
            log.error("unreadable sink ledger %s: what its collector held is unknown", path)
            _remove(path)
            continue
        if start_time(pid) == started:
            log.warning("spool %s is also used by a running collector (pid %d)", directory, pid)
            continue
        found.append(
            Claimed(
                pid,
                pending,
                tuple((n, _read(path.with_suffix(f".{s}")) if n else None) for s, n in zip(SLOTS, counts, strict=True)),
                carried,
            )
        )
        _remove(path)
    return found


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _remove(ledger: Path) -> None:
    ledger.unlink(missing_ok=True)
    for slot in SLOTS:
        ledger.with_suffix(f".{slot}").unlink(missing_ok=True)

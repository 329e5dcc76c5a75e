"""SIFTR log files as a record source: `nettrail analyze FILE.siftr` reads them through here.

Identity follows the capture convention (brief: "captures use host_id = capture file
name, boot_id = hex sha256 prefix of the file"). Non-zero skip counters in the footer
become LossReport records, so a report shows the blind spots next to the samples.

Keep in sync with: translators/siftr_log.py (the format), collector/commands/analyze.py
(detection by the ``enable_time_secs=`` header).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from translators.records import LossReport, Record
from translators.siftr_log import SiftrFooter, SiftrHeader, is_siftr_log, open_log

BOOT_ID_HEX = 16


def looks_like_siftr(path: str | os.PathLike[str]) -> bool:
    """True when the file starts with a SIFTR header line."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(32)
    except OSError:
        return False
    return is_siftr_log(head.decode("ascii", "replace"))


def file_identity(path: str | os.PathLike[str]) -> tuple[str, str]:
    """(host_id, boot_id) for a file: its name and a sha256 prefix of its bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return Path(path).name, digest.hexdigest()[:BOOT_ID_HEX]


def read_siftr(path: str | os.PathLike[str]) -> Iterator[Record]:
    """Streams the samples of a SIFTR log, then one LossReport per non-zero skip counter."""
    host_id, boot_id = file_identity(path)
    seq = 0
    for item in open_log(path, host_id=host_id, boot_id=boot_id):
        if isinstance(item, SiftrHeader):
            continue
        if isinstance(item, SiftrFooter):
            yield from _losses(item, host_id, boot_id, seq)
            continue
        seq = item.seq
        yield item


def _losses(footer: SiftrFooter, host_id: str, boot_id: str, seq: int) -> Iterator[LossReport]:
    ts = footer.disable_secs + footer.disable_usecs / 1e6
    received = footer.counters.get("total_tcp_pkts")
    for name, count in footer.counters.items():
        if "skipped_pkts_" not in name or count == 0:
            continue
        seq += 1
        yield LossReport(
            host_id=host_id, boot_id=boot_id, seq=seq, ts_ns=footer.disable_secs * 10**9 + footer.disable_usecs * 1000,
            ts_wall=ts, provider="siftr", probe="siftr", hook="file/siftr",
            event_type=name.removeprefix("num_"), lost=count, lost_total=count, received_total=received,
        )  # fmt: skip

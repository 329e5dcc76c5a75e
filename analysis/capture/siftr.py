"""SIFTR log files as a record source: `nettrail analyze FILE.siftr` reads them through here.

Identity follows the capture convention (brief: "captures use host_id = capture file
name, boot_id = hex sha256 prefix of the file"). Non-zero skip counters in the footer
become LossReport records, so a report shows the blind spots next to the samples.

`analyze_siftr` is what `nettrail analyze` runs for such a file: flow summaries,
loss records, the samples with --packets; the CLI's --store wraps the stream (the
database half lives in webapp/traces/capture_store.py).
Keep in sync with: translators/siftr_log.py (the format), nettrail/commands/analyze.py
(detection by the ``enable_time_secs=`` header), docs/reports.md.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from translators.records import LossReport, Record, SiftrSample
from translators.siftr_log import SiftrFooter, SiftrHeader, SiftrLogError, is_siftr_log, open_log
from xo import Writer, libxo_from_args

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


# --- `nettrail analyze FILE.siftr` ---------------------------------------------------------------


@dataclass
class FlowSummary:
    src: str | None
    sport: int | None
    dst: str | None
    dport: int | None
    conn_uuid: str | None
    samples: int = 0
    first: float = 0.0
    last: float = 0.0
    max_cwnd: int = 0
    last_srtt: int | None = None


def analyze_siftr(
    args: argparse.Namespace, store: Callable[[Iterator[Record], str], Iterator[Record]] | None = None
) -> int:
    """The analyze command for a SIFTR log: flows, totals, loss; samples with --packets.

    ``store`` (the CLI's --store) wraps the record stream: it keeps the records as they
    pass; this library never touches the database itself."""
    options = libxo_from_args(args)
    if getattr(args, "server", None):
        print("nettrail: analyze: --server is not supported for SIFTR logs; use --store", file=sys.stderr)
        return 2
    host_id, boot_id = file_identity(args.file)
    flows: dict[str | None, FlowSummary] = {}
    losses: list[LossReport] = []
    w = Writer(sys.stdout, options)
    w.open_container("analyze")
    w.emit("{L:File}{Lc:}{:file/%s}\n{L:Format}{Lc:}{:format/%s}\n", file=args.file, format="siftr")
    w.emit("{L:Host}{Lc:}{:host_id/%s}\n{L:Capture id}{Lc:}{:boot_id/%s}\n", host_id=host_id, boot_id=boot_id)
    try:
        records = read_siftr(args.file)
        for rec in store(records, host_id) if store is not None else records:
            if isinstance(rec, LossReport):
                losses.append(rec)
                continue
            assert isinstance(rec, SiftrSample)
            _fold(flows, rec)
            if getattr(args, "packets", False):
                w.record(rec, name="siftr_sample")
    except SiftrLogError as exc:
        w.finish()
        print(f"nettrail: analyze: {exc}", file=sys.stderr)
        return 1
    _write_flows(w, flows.values())
    for loss in losses:
        w.record(loss, name="loss_report")
    w.finish()
    return 0


def _fold(flows: dict[str | None, FlowSummary], s: SiftrSample) -> None:
    flow = flows.get(s.conn_uuid)
    if flow is None:
        flow = flows[s.conn_uuid] = FlowSummary(s.src, s.sport, s.dst, s.dport, s.conn_uuid, first=s.ts_wall)
    flow.samples += 1
    flow.last = s.ts_wall
    flow.max_cwnd = max(flow.max_cwnd, s.snd_cwnd or 0)
    flow.last_srtt = s.srtt


def _write_flows(w: Writer, flows: Iterable[FlowSummary]) -> None:
    w.open_list("flow")
    for f in flows:
        w.open_instance("flow")
        w.emit(
            "{k:src/%s}:{k:sport/%d} -> {k:dst/%s}:{k:dport/%d} {:conn_uuid/%s} {Lw:samples}{:samples/%d} "
            "{Lw:from}{:first/%.6f} {Lw:to}{:last/%.6f} {Lw:max cwnd}{:max_cwnd/%d}\n",
            src=f.src, sport=f.sport, dst=f.dst, dport=f.dport, conn_uuid=f.conn_uuid, samples=f.samples,
            first=f.first, last=f.last, max_cwnd=f.max_cwnd,
        )  # fmt: skip
        w.close_instance("flow")
    w.close_list("flow")

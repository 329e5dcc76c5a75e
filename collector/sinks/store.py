"""Imported captures into a nettrail database: locally (`--store`) or to a server (`--server/--token`).

`capture_records(path, name)` runs the capture pipeline of `nettrail analyze` over a
file and yields its records (per-packet records with `packets=True`, then the
connection summaries, then the alerts); host_id is the capture name, boot_id the
capture id, so re-importing the same file stores nothing twice.
`store_records(records, host_name)` writes records into the local database through
the ingest endpoint's own code path (webapp.traces.store.store_batch + push), so the
Connection rows and live pushes are the same as for a collector.

This module imports Django lazily: the collector stays usable without the webapp.
Keep in sync with: collector/commands/analyze.py (the flags), webapp/traces/ingest.py
(same storage steps), webapp/api/upload.py (the browser's upload), docs/collector-sinks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from collector.sinks.token_source import add_token_arguments, resolve_token
from translators.records import Record

STORE_CHUNK = 5000  # records per transaction: bounded memory, one fsync per chunk


@dataclass
class StoreTotals:
    stored: int = 0
    duplicates: int = 0


def capture_records(
    path: str, name: str | None = None, packets: bool = False, compat: str = "upstream", keep_bytes: bool = False
) -> Iterator[Record]:
    """Every record `nettrail analyze` derives from a capture file; raises CaptureError/OSError.
    keep_bytes: packet records carry their frame's bytes (for pcap export, collector/export/frames.py)."""
    from collector.analysis.capture_flows import CapturePipeline
    from collector.commands.analyze import capture_id
    from collector.export.frames import with_frame_bytes
    from collector.sources.pcap import CaptureReader
    from translators.packet import decode_batch

    pipeline = CapturePipeline(name or os.path.basename(path), capture_id(path), packets=packets, compat=compat)
    with CaptureReader(path) as reader:
        for batch in reader.batches():
            records = pipeline.feed(decode_batch(batch, want_options=packets))
            yield from with_frame_bytes(records, batch) if keep_bytes else records
    yield from pipeline.connections()
    yield from pipeline.alerts()


def store_records(records: Iterable[Record], host_name: str) -> StoreTotals:
    """Store records of host `host_name` as ingest does (atomic per chunk, idempotent, pushed live)."""
    from webapp.traces import push
    from webapp.traces.models import Host
    from webapp.traces.store import store_batch

    Host.objects.get_or_create(name=host_name)
    totals = StoreTotals()
    chunk: list[Record] = []
    for rec in records:
        if rec.host_id != host_name:
            raise ValueError(f"record seq {rec.seq}: host_id {rec.host_id!r} is not {host_name!r}")
        chunk.append(rec)
        if len(chunk) >= STORE_CHUNK:
            _store_chunk(chunk, totals, store_batch, push.push)
            chunk = []
    if chunk:
        _store_chunk(chunk, totals, store_batch, push.push)
    return totals


def _store_chunk(chunk: list[Record], totals: StoreTotals, store_batch: Any, push: Any) -> None:
    from django.db import transaction

    result = store_batch(chunk)
    totals.stored += result.stored
    totals.duplicates += result.duplicates
    # Inside a caller's transaction (the upload page) browsers hear of the records only
    # once they are committed; otherwise on_commit runs at once.
    transaction.on_commit(lambda: push(result.new))


# --- `nettrail analyze FILE --store | --server URL --token T` ---------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("keeping the results")
    where = group.add_mutually_exclusive_group()
    where.add_argument("--store", action="store_true", help="store the records in the local nettrail database")
    where.add_argument("--server", metavar="URL", help="send the records to a nettrail server (needs a token)")
    add_token_arguments(group, "ingest token of the capture's host on --server")
    group.add_argument(
        "--keep-bytes",
        action="store_true",
        help="store the packet records with their captured bytes, for pcap export (implies packet records)",
    )
    group.add_argument(
        "--spool", metavar="DIR", help="spool for --server when it is unreachable (default: ~/.cache/nettrail/spool)"
    )


def wanted(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "store", False) or getattr(args, "server", None))


def ship(args: argparse.Namespace) -> int:
    """Store or send the capture's records after the analysis was printed; returns the exit status."""
    name = os.path.basename(args.file)
    # Stored packet records always keep their bytes (pcap export needs them); --keep-bytes
    # asks for packet records without printing them.
    packets = bool(getattr(args, "packets", False) or getattr(args, "keep_bytes", False))
    try:
        token = resolve_token(args) if args.server else None
    except ValueError as exc:
        print(f"nettrail: analyze: {exc}", file=sys.stderr)
        return 2
    if args.server and not token:
        print(
            "nettrail: analyze: --server needs --token, --token-file or $NETTRAIL_TOKEN (see `nettrail token create`)",
            file=sys.stderr,
        )
        return 2
    if args.store:
        from collector.commands._django import migrate, setup_django

        setup_django()
        migrate()
        totals = store_records(capture_records(args.file, name, packets, _compat(args), keep_bytes=packets), name)
        print(
            f"nettrail: analyze: stored {totals.stored} records ({totals.duplicates} already there) under host {name!r}",
            file=sys.stderr,
        )
        return 0
    return _send(args, name, packets, str(token))


def _compat(args: argparse.Namespace) -> str:
    """The TCP-analysis flavour `analyze --wireshark` chose, so stored flags match the printed ones."""
    return str(getattr(args, "wireshark", None) or "upstream")


def default_spool_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "nettrail", "spool")


def _send(args: argparse.Namespace, name: str, packets: bool, token: str) -> int:
    from collector.sinks.http import HttpSink

    spool = args.spool or default_spool_dir()
    sink = HttpSink(args.server, token, spool)
    count = 0
    for rec in capture_records(args.file, name, packets, _compat(args), keep_bytes=packets):
        sink.write([rec])
        count += 1
    sink.close(timeout=30.0)
    if sink.stats.rejected_records:
        print(
            f"nettrail: analyze: the server rejected {sink.stats.rejected_records} records (kept in {spool}/rejected)",
            file=sys.stderr,
        )
        return 1
    if sink.spooled:
        print(
            f"nettrail: analyze: the server did not take every batch; they wait in {spool} (sent by the next run)",
            file=sys.stderr,
        )
        return 1
    print(f"nettrail: analyze: sent {count} records to {args.server} under host {name!r}", file=sys.stderr)
    return 0

"""`nettrail analyze FILE --store | --server URL --token T`: keeping a capture's records.

The records are the capture's (analysis/capture/file_records.py); --store writes them
into the local database through webapp/traces/capture_store.py (the ingest endpoint's
own storage steps), --server sends them through the agent's HTTP sink. Django is
imported only when --store runs, so `nettrail analyze` alone starts without it.
Keep in sync with: nettrail/commands/analyze.py (the flags), webapp/api/upload.py (the
browser's upload), docs/collector-sinks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator

from analysis.capture.file_records import capture_records
from collector.sinks.http_transport import add_transport_arguments, check_server_url, transport_options
from collector.sinks.token_source import add_token_arguments, resolve_token
from translators.records import Record

# --- `nettrail analyze FILE --store | --server URL --token T` ---------------------------------

# Records are stored in chunks as they pass (webapp/traces/capture_store.py), not in one
# transaction that would keep ingest waiting for the whole file.
REFUSED = "it and what follows are not stored, the records before it are (none is ever stored twice)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("keeping the results")
    where = group.add_mutually_exclusive_group()
    where.add_argument("--store", action="store_true", help="store the records in the local nettrail database")
    where.add_argument("--server", metavar="URL", help="send the records to a nettrail server (needs a token)")
    add_token_arguments(group, "ingest token of the capture's host on --server")
    add_transport_arguments(group)
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
    if args.server:
        try:
            check_server_url(args.server, **transport_options(args))
        except ValueError as exc:
            print(f"nettrail: analyze: {exc}", file=sys.stderr)
            return 2
    if args.store:
        from nettrail.commands._django import migrate, setup_django

        setup_django()
        migrate()
        from webapp.traces.capture_store import store_records
        from webapp.traces.timestamps import ImpossibleTime

        try:
            totals = store_records(capture_records(args.file, name, packets, _compat(args), keep_bytes=packets), name)
        except ImpossibleTime as exc:  # a time before 2000 or over a day ahead, as ingest refuses
            print(f"nettrail: analyze: {args.file}: {exc}: {REFUSED}", file=sys.stderr)
            return 1
        print(
            f"nettrail: analyze: stored {totals.stored} records ({totals.duplicates} already there) under host {name!r}",
            file=sys.stderr,
        )
        return 0
    return _send(args, name, packets, str(token))


def store_passing(records: Iterator[Record], host_id: str) -> Iterator[Record]:
    """`analyze FILE.siftr --store`: the records pass on to the printout and go to the local
    database in atomic chunks as they pass; the count is printed at the end."""
    from nettrail.commands._django import migrate, setup_django

    setup_django()
    migrate()
    from webapp.traces.capture_store import StoreTotals
    from webapp.traces.capture_store import store_passing as store
    from webapp.traces.timestamps import ImpossibleTime

    totals = StoreTotals()
    try:
        yield from store(records, host_id, totals)
    except ImpossibleTime as exc:  # the SIFTR reader stops only for its own errors: exit here
        print(f"nettrail: analyze: {host_id}: {exc}: {REFUSED}", file=sys.stderr)
        raise SystemExit(1) from None
    print(f"nettrail: analyze: stored {totals.stored} records under host {host_id!r}", file=sys.stderr)


def _compat(args: argparse.Namespace) -> str:
    """The TCP-analysis flavour `analyze --wireshark` chose, so stored flags match the printed ones."""
    return str(getattr(args, "wireshark", None) or "upstream")


def default_spool_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "nettrail", "spool")


def _send(args: argparse.Namespace, name: str, packets: bool, token: str) -> int:
    from collector.sinks.http import HttpSink

    spool = args.spool or default_spool_dir()
    sink = HttpSink(args.server, token, spool, **transport_options(args))
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

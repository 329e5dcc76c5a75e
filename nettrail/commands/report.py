"""`nettrail report`: stored records (the webapp's database) as a trace report, SIFTR log or pcap.

Reads the same database as the webapp (NETTRAIL_DATA / DATABASE_URL through the
Django settings). Exit status: 0 done; 1 unknown connection/host, nothing to export,
or a failure while writing; 2 bad arguments (filter, time range, style). With
``-o FILE`` the output goes to a temporary file beside FILE, renamed on success and
removed on failure, so FILE is never left half-written.
Keep in sync with: webapp/reports/views.py (same filters), docs/reports.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any, BinaryIO, TextIO, cast

from analysis.export.atomic import atomic_output
from analysis.export.filters import FilterError, ReportFilter, build_filter
from nettrail.commands._django import setup_django
from xo import add_libxo_argument, libxo_from_args

PROG = "nettrail report"
SIFTR_VERSIONS = ("1.2.3", "1.3.0", "2.0", "2.2")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "report",
        help="stored records as a trace report (text/JSON/XML/HTML), a SIFTR log or a pcap",
        description="Render records stored by the webapp. Times: epoch seconds, ISO-8601 or an age (15m, 2h, 1d).",
    )
    p.add_argument("--host", help="only these hosts (comma-separated host ids)")
    p.add_argument("--connection", metavar="UUID", help="only this connection")
    p.add_argument("--since", metavar="T", help="records at or after T")
    p.add_argument("--until", metavar="T", help="records at or before T")
    p.add_argument("--kind", metavar="K,...", help="only these record kinds (default: all)")
    out = p.add_mutually_exclusive_group()
    out.add_argument(
        "--pcap", action="store_true", help="write the packet records' frames as a pcap (needs -o or a pipe)"
    )
    out.add_argument("--siftr", nargs="?", const="1.3.0", choices=SIFTR_VERSIONS, metavar="VERSION",
                     help="write the SIFTR samples as a siftr(4) log (default version 1.3.0)")  # fmt: skip
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE (atomically) instead of stdout")
    p.add_argument("--chunk-size", type=int, default=2000, help=argparse.SUPPRESS)
    add_libxo_argument(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    options = libxo_from_args(args, prog=PROG)  # exits 2 on a bad style
    try:
        f = build_filter(args.host, args.connection, args.since, args.until, args.kind)
    except FilterError as exc:
        return _fail(2, str(exc))
    if args.pcap and args.output is None and sys.stdout.isatty():
        return _fail(2, "refusing to write a pcap to a terminal: use -o FILE or a pipe")
    setup_django()
    from django.db import DatabaseError

    from webapp.reports.exports import ExportUnavailable
    from webapp.reports.render import ReportNotFound, check

    try:
        check(f)
        with _output(args.output, binary=args.pcap) as stream:
            _write(args, f, options, stream)
    except (ReportNotFound, ExportUnavailable) as exc:
        return _fail(1, str(exc))
    except DatabaseError as exc:
        return _fail(1, f"cannot read the database: {exc} (is the webapp set up? NETTRAIL_DATA / DATABASE_URL)")
    except BrokenPipeError:
        raise  # `nettrail report | head`: the reader left; cli.main exits quietly
    except OSError as exc:
        return _fail(1, f"cannot write {args.output or 'stdout'}: {exc.strerror or exc}")
    return 0


def _write(args: argparse.Namespace, f: ReportFilter, options: Any, stream: IO[Any]) -> None:
    from webapp.reports.exports import pcap_steps, siftr_steps
    from webapp.reports.render import report_steps
    from xo import Writer

    if args.pcap:
        steps = pcap_steps(cast(BinaryIO, stream), f)
    elif args.siftr:
        steps = siftr_steps(cast(TextIO, stream), f, args.siftr)
    else:
        steps = report_steps(Writer(cast(TextIO, stream), options), f, args.chunk_size)
    for _ in steps:
        pass


@contextmanager
def _output(path: str | None, *, binary: bool) -> Iterator[IO[Any]]:
    if path is None:
        yield sys.stdout.buffer if binary else sys.stdout
        return
    with atomic_output(path, binary=binary) as stream:
        yield stream


def _fail(status: int, message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return status

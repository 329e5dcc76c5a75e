"""``nettrail alerts FILE``: replay a record file through the anomaly rules, print the alerts.

FILE is what ``nettrail collect --out`` or ``nettrail analyze`` wrote: FILE.jsonl (one
JSON record per line), FILE.msgpack (a stream of msgpack records) or ``-`` for JSON
lines on stdin. Records are fed in file order (record time drives the windows), alerts
print with xo as they are emitted (``--final``: only the last version of each alert).
A line that is not a valid record is reported as FILE:LINE and skipped, the rest is
still analysed, and the exit status is then 1. Keep in sync with docs/alerts.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import msgspec

from analysis.alerts.config import ConfigError, load_config
from analysis.alerts.engine import RuleEngine
from analysis.alerts.engine import run as run_engine
from translators.records import Alert, AnyRecord, Record, from_json
from xo import add_libxo_argument, libxo_from_args, render_records

PROG = "nettrail alerts"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("alerts", help="replay a record file through the anomaly rules and print the alerts")
    p.add_argument("file", help="records: FILE.jsonl, FILE.msgpack, or - for JSON lines on stdin")
    p.add_argument(
        "--rules", default=None, help="rules TOML file (default: $NETTRAIL_RULES, else the built-in defaults)"
    )
    p.add_argument("--final", action="store_true", help="print only the last version of each alert, in order of start")
    add_libxo_argument(p)
    p.set_defaults(func=run)


class Reader:
    """Records of a file with bad entries reported (FILE:LINE: why) and skipped."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.errors = 0

    def bad(self, where: int, why: str) -> None:
        self.errors += 1
        print(f"{PROG}: {self.name}:{where}: {why}", file=sys.stderr)

    def json_lines(self, stream: IO[bytes]) -> Iterator[Record]:
        for number, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                yield from_json(line)
            except (msgspec.DecodeError, msgspec.ValidationError, TypeError, ValueError) as exc:
                self.bad(number, str(exc))

    def msgpack_stream(self, stream: IO[bytes]) -> Iterator[Record]:
        import msgpack  # a dependency of channels-redis; only needed for this format

        unpacker = msgpack.Unpacker(stream, raw=False, strict_map_key=False)
        number = 0
        while True:
            number += 1
            try:
                obj = unpacker.unpack()
            except msgpack.OutOfData:
                return
            except (msgpack.UnpackException, ValueError) as exc:
                self.bad(number, f"not msgpack: {exc}")
                return  # the stream cannot be resynchronised after a corrupt object
            try:
                yield msgspec.convert(obj, AnyRecord)
            except (msgspec.ValidationError, TypeError, ValueError) as exc:
                self.bad(number, str(exc))


def run(args: argparse.Namespace) -> int:
    options = libxo_from_args(args, prog=PROG)
    try:
        config = load_config(args.rules)
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    reader = Reader(args.file)
    if args.file == "-":
        records = reader.json_lines(sys.stdin.buffer)
        return _report(records, config, options, reader, args.final)
    path = Path(args.file)
    if path.suffix not in (".jsonl", ".msgpack"):
        print(f"{PROG}: {path}: the file name must end in .jsonl or .msgpack", file=sys.stderr)
        return 2
    try:
        stream = path.open("rb")
    except OSError as exc:
        print(f"{PROG}: {path}: {exc.strerror}", file=sys.stderr)
        return 1
    with stream:
        records = reader.json_lines(stream) if path.suffix == ".jsonl" else reader.msgpack_stream(stream)
        return _report(records, config, options, reader, args.final)


def _report(records: Iterator[Record], config: Any, options: Any, reader: Reader, final: bool) -> int:
    alerts: Iterator[Alert] = (r for r in run_engine(records, engine=RuleEngine(config)) if isinstance(r, Alert))
    if final:
        last: dict[str, Alert] = {}
        for alert in alerts:
            last[alert.alert_id or str(alert.seq)] = alert
        alerts = iter(sorted(last.values(), key=lambda a: (a.start, a.seq)))
    render_records(alerts, options, sys.stdout, container="nettrail", list_name="alert")
    return 1 if reader.errors else 0

"""The `nettrail` command line: one subcommand per module in nettrail/commands/.

Each module in COMMANDS defines `register(subparsers)` which adds its parser and sets
`func` (called with the parsed arguments, returns the exit status). Add a command by
writing its module and listing it here; nothing else needs to change.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMANDS: tuple[str, ...] = ("token", "up", "analyze", "report", "collect", "alerts", "capture")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nettrail",
        description="Network tracing for Linux: kernel providers, capture analysis, web dashboard.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"nettrail.commands.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())

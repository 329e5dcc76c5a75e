"""The `nettrail` command line: one subcommand per module in nettrail/commands/.

Each module in COMMANDS defines `register(subparsers)` which adds its parser and sets
`func` (called with the parsed arguments, returns the exit status). Add a command by
writing its module and listing it here; nothing else needs to change.

Start-up time: only the module of the command being run is imported (`nettrail analyze`
must not pay for the collector's BPF loader or the webapp's imports, issue 17 item 7);
`nettrail --help`, no command or an unknown one import them all for the full help.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMANDS: tuple[str, ...] = ("token", "up", "serve", "analyze", "report", "collect", "alerts", "capture")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; given the arguments, only the named command's module is imported."""
    parser = argparse.ArgumentParser(
        prog="nettrail",
        description="Network tracing for Linux: kernel providers, capture analysis, web dashboard.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    command = _command_of(argv)
    for name in (command,) if command is not None else COMMANDS:
        importlib.import_module(f"nettrail.commands.{name}").register(subparsers)
    return parser


def _command_of(argv: Sequence[str] | None) -> str | None:
    """The command named by the first argument, when it is one (the main parser has no
    options besides --help, so the command is always the first argument)."""
    if argv is None or not argv:
        return None
    return argv[0] if argv[0] in COMMANDS else None


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
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

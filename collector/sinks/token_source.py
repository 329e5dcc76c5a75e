"""Where an HTTP sink's ingest token comes from: ``--token T``, ``--token-file PATH``
or ``$NETTRAIL_TOKEN``, and the private file ``nettrail up`` hands its collector.

A token on the command line is visible to every local user in ``ps`` and
/proc/PID/cmdline; a file (mode 0600) or the environment (readable only by the
process owner and root) is not. Used by ``nettrail collect`` and ``nettrail analyze
--server``. Keep in sync with docs/webapp.md (security model) and docs/collector.md.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

ENV = "NETTRAIL_TOKEN"


def add_token_arguments(parser: Any, token_help: str) -> None:
    """--token and --token-file on a parser or argument group."""
    parser.add_argument("--token", metavar="T", help=f"{token_help} (visible in ps: prefer --token-file or ${ENV})")
    parser.add_argument(
        "--token-file", metavar="PATH", help=f"read the ingest token from PATH (first line); also ${ENV}"
    )


def resolve_token(args: argparse.Namespace) -> str | None:
    """The token: --token, else --token-file, else $NETTRAIL_TOKEN; None when none is given.

    ValueError says what is wrong (both flags, an unreadable or empty file).
    """
    token, path = getattr(args, "token", None), getattr(args, "token_file", None)
    if token and path:
        raise ValueError("give --token or --token-file, not both")
    if token:
        return str(token)
    if path:
        return read_token_file(Path(path))
    return os.environ.get(ENV) or None


def read_token_file(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--token-file {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    lines = text.strip().splitlines()
    token = lines[0].strip() if lines else ""
    if not token:
        raise ValueError(f"--token-file {path}: the file is empty")
    return token


def write_token_file(path: Path, token: str) -> None:
    """Create PATH afresh, mode 0600 and owned by the caller, holding the token.

    Written to a new file then renamed over PATH: an existing file (perhaps chowned to
    the webapp user by a previous start) is replaced, never rewritten in place.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(token + "\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise

"""xo: libxo-style output (text, XML, JSON, HTML) from one stream of calls.

Public API (the "xo API" contract in the nettrail brief; other modules code against it):
parse_libxo, XoOptionError, add_libxo_argument, libxo_from_args, Writer, render_records.
Keep in sync with: ../shared/docs/libxo.md and docs/output.md.
"""

from __future__ import annotations

from xo.fields import XoFormatError, parse_format
from xo.options import (
    COMMAND_DEFAULTS,
    XoOptionError,
    XoOptions,
    add_libxo_argument,
    command_options,
    libxo_from_args,
    options_from_env,
    parse_libxo,
)
from xo.writer import Writer, render_records

__all__ = [
    "COMMAND_DEFAULTS",
    "command_options",
    "XoFormatError",
    "XoOptionError",
    "XoOptions",
    "Writer",
    "add_libxo_argument",
    "libxo_from_args",
    "options_from_env",
    "parse_format",
    "parse_libxo",
    "render_records",
]

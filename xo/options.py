"""`--libxo` option parsing: the three spellings, brief letters, LIBXO_OPTIONS.

Keep in sync with: ../shared/docs/libxo.md §2 (words, letters, the LIBXO_OPTIONS subset)
and docs/output.md (the user-facing list). Anything not listed here is an error, as in
libxo, and the error names the allowed values.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

STYLES: tuple[str, ...] = ("text", "xml", "json", "html")

# word -> XoOptions attribute. `flush` and `flush-line` both flush; `-line` only at newlines.
FLAG_WORDS: dict[str, str] = {
    "pretty": "pretty",
    "warn": "warn",
    "keys": "keys",
    "units": "units",
    "underscores": "underscores",
    "dtrt": "dtrt",
    "xpath": "xpath",
    "info": "info",
    "no-humanize": "no_humanize",
    "no-top": "no_top",
    "not-first": "not_first",
    "flush": "flush",
    "flush-line": "flush_line",
}
STYLE_LETTERS: dict[str, str] = {"T": "text", "X": "xml", "J": "json", "H": "html"}
FLAG_LETTERS: dict[str, str] = {
    "P": "pretty",
    "W": "warn",
    "x": "xpath",
    "I": "info",
    "n": "no-humanize",
    "u": "underscores",
    "k": "keys",
    "U": "units",
    "F": "flush-line",
}
# libxo reads only these from the environment (no styles: children inherit the variable).
ENV_WORDS: tuple[str, ...] = ("flush", "flush-line", "no-humanize", "pretty", "underscores", "warn")
ENV_VAR = "LIBXO_OPTIONS"


class XoOptionError(ValueError):
    """A bad --libxo string; the message names the allowed values."""


@dataclass(frozen=True)
class XoOptions:
    """Parsed --libxo settings. Frozen and hashable: renderers cache templates per value."""

    style: str = "text"
    pretty: bool = False
    warn: bool = False
    keys: bool = False
    units: bool = False
    underscores: bool = False
    dtrt: bool = False
    xpath: bool = False
    info: bool = False
    no_humanize: bool = False
    no_top: bool = False
    not_first: bool = False
    flush: bool = False
    flush_line: bool = False
    indent: int = 0
    # Not a libxo word: nettrail's `--relative` (text style: times as offsets from the first).
    relative: bool = False

    def words(self) -> str:
        """The canonical word spelling, e.g. 'json,pretty' (round-trips through parse_libxo)."""
        out = [self.style]
        out += [word for word, attr in FLAG_WORDS.items() if getattr(self, attr)]
        if self.indent:
            out.append(f"indent={self.indent}")
        return ",".join(out)


def _allowed() -> str:
    letters = " ".join(f"{k}={v}" for k, v in (STYLE_LETTERS | FLAG_LETTERS).items())
    return f"styles: {', '.join(STYLES)}; flags: {', '.join(FLAG_WORDS)}, indent=N; letters: {letters}"


def _apply_word(values: dict[str, Any], word: str, *, env: bool = False) -> None:
    if env and word not in ENV_WORDS:
        raise XoOptionError(f"{ENV_VAR}: {word!r} is not allowed here (allowed: {', '.join(ENV_WORDS)})")
    if word in STYLES:
        values["style"] = word
    elif word in FLAG_WORDS:
        values[FLAG_WORDS[word]] = True
    elif word.startswith("indent="):
        values["indent"] = _indent(word[len("indent=") :])
    elif word == "":
        raise XoOptionError(f"empty word in --libxo options ({_allowed()})")
    else:
        raise XoOptionError(f"unknown --libxo style or flag {word!r} ({_allowed()})")


def _indent(text: str) -> int:
    if not text.isdigit():
        raise XoOptionError(f"indent needs a number, got {text!r}")
    return int(text)


def _apply_letters(values: dict[str, Any], letters: str) -> None:
    i = 0
    while i < len(letters):
        ch = letters[i]
        i += 1
        if ch in STYLE_LETTERS:
            values["style"] = STYLE_LETTERS[ch]
        elif ch in FLAG_LETTERS:
            values[FLAG_WORDS[FLAG_LETTERS[ch]]] = True
        elif ch == "i":  # iN: base indent
            j = i
            while j < len(letters) and letters[j].isdigit():
                j += 1
            values["indent"] = _indent(letters[i:j])
            i = j
        else:
            raise XoOptionError(f"unknown --libxo letter {ch!r} ({_allowed()})")


def _split_words(text: str) -> list[str]:
    return text.replace(":", ",").split(",")


def parse_libxo(spec: str, base: XoOptions | None = None) -> XoOptions:
    """Parse 'json,pretty', '=json,pretty' or ':JP' (':XP,keys' mixes both) on top of `base`."""
    values = dataclasses.asdict(base or XoOptions())
    if spec.startswith("="):
        spec = spec[1:]
    if spec.startswith(":"):
        letters, _, rest = spec[1:].partition(",")
        if not letters and not rest:
            raise XoOptionError(f"empty --libxo options ({_allowed()})")
        _apply_letters(values, letters)
        words = _split_words(rest) if rest else []
    else:
        if not spec:
            raise XoOptionError(f"empty --libxo options ({_allowed()})")
        words = _split_words(spec)
    for word in words:
        _apply_word(values, word.strip())
    return XoOptions(**values)


# nettrail's commands and download endpoints write JSON member names with underscores:
# then a record's JSON keys are its wire names (`conn_uuid`, `prev_state`), the same as in
# ingest, the API and `--out FILE.jsonl`. XML and HTML keep libxo's hyphens. The bare
# library (parse_libxo) keeps libxo's own default.
COMMAND_DEFAULTS = XoOptions(underscores=True)


def command_options(spec: str) -> XoOptions:
    """Options of a download endpoint's `format` parameter, with the commands' defaults."""
    return parse_libxo(spec, COMMAND_DEFAULTS)


def options_from_env(environ: Mapping[str, str] | None = None, base: XoOptions | None = None) -> XoOptions:
    """Flags from LIBXO_OPTIONS (the subset libxo accepts there) over `base` (defaults when unset)."""
    text = (os.environ if environ is None else environ).get(ENV_VAR, "")
    values = dataclasses.asdict(base or XoOptions())
    for word in _split_words(text) if text.strip() else []:
        _apply_word(values, word.strip(), env=True)
    return XoOptions(**values)


def _rewrite_colon_form(args: Sequence[str]) -> list[str]:
    # argparse cannot match '--libxo:JP' (no '=' and no exact name); libxo strips its own
    # option from argv before the program parses, we turn it into '--libxo=:JP' instead.
    out: list[str] = []
    for arg in args:
        if arg == "--":
            out.extend(args[len(out) :])
            break
        out.append("--libxo=" + arg[len("--libxo") :] if arg.startswith("--libxo:") else arg)
    return out


def add_libxo_argument(parser: argparse.ArgumentParser) -> None:
    """Add `--libxo` (word list after a space or '=', or brief letters after ':')."""
    parser.add_argument(
        "--libxo",
        metavar="OPTIONS",
        default=None,
        help="output style and flags, libxo syntax: text|xml|json|html[,pretty,warn,keys,units,underscores,"
        "dtrt,xpath,info,no-humanize,no-top,not-first,flush,flush-line] or :LETTERS (e.g. :JP); "
        f"flags also from ${ENV_VAR}",
    )
    parser.add_argument(
        "--relative",
        action="store_true",
        help="text style: show times as seconds since the first time shown instead of ISO 8601 UTC",
    )
    original = parser.parse_known_args

    def parse_known_args(args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        raw = sys.argv[1:] if args is None else args
        return original(_rewrite_colon_form(list(raw)), namespace)

    parser.parse_known_args = parse_known_args  # type: ignore[method-assign,assignment]


def libxo_from_args(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None, prog: str = "nettrail"
) -> XoOptions:
    """Options from LIBXO_OPTIONS then --libxo over COMMAND_DEFAULTS; a bad value: one line, exit 2."""
    try:
        base = options_from_env(environ, COMMAND_DEFAULTS)
        if getattr(args, "relative", False):
            base = dataclasses.replace(base, relative=True)
        spec = getattr(args, "libxo", None)
        return base if spec is None else parse_libxo(spec, base)
    except XoOptionError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None

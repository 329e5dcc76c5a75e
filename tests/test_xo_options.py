"""--libxo parsing: the three spellings, brief letters, LIBXO_OPTIONS, and bad values.

Keep in sync with: xo/options.py and ../shared/docs/libxo.md §2.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from xo import COMMAND_DEFAULTS, XoOptionError, add_libxo_argument, libxo_from_args, parse_libxo
from xo.options import XoOptions, options_from_env

ROOT = Path(__file__).resolve().parent.parent


def parser_with_subcommand() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(prog="nettrail")
    sub = parser.add_subparsers(dest="command").add_parser("show")
    add_libxo_argument(sub)
    sub.add_argument("path", nargs="?")
    return parser, sub


@pytest.mark.parametrize("spec", ["json,pretty", "=json,pretty", ":JP", "json:pretty", ":J,pretty"])
def test_the_three_spellings_give_the_same_options(spec: str) -> None:
    assert parse_libxo(spec) == XoOptions(style="json", pretty=True)


@pytest.mark.parametrize(
    ("letter", "attr", "value"),
    [
        ("T", "style", "text"),
        ("X", "style", "xml"),
        ("J", "style", "json"),
        ("H", "style", "html"),
        ("P", "pretty", True),
        ("W", "warn", True),
        ("x", "xpath", True),
        ("I", "info", True),
        ("n", "no_humanize", True),
        ("u", "underscores", True),
        ("k", "keys", True),
        ("U", "units", True),
        ("F", "flush_line", True),
    ],
)
def test_each_brief_letter_sets_its_option(letter: str, attr: str, value: object) -> None:
    assert getattr(parse_libxo(":" + letter), attr) == value


def test_every_word_is_accepted_and_round_trips() -> None:
    words = "html,pretty,warn,keys,units,underscores,dtrt,xpath,info,no-humanize,no-top,not-first,flush,flush-line"
    options = parse_libxo(words + ",indent=4")
    assert options.words() == words + ",indent=4"
    assert parse_libxo(options.words()) == options
    assert parse_libxo(":HPi4,keys") == XoOptions(style="html", pretty=True, indent=4, keys=True)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("jsn", "unknown --libxo style or flag 'jsn'"),
        ("json,prety", "unknown --libxo style or flag 'prety'"),
        (":JQ", "unknown --libxo letter 'Q'"),
        ("", "empty --libxo options"),
        ("json,,pretty", "empty word"),
        ("indent=x", "indent needs a number"),
        ("color", "unknown --libxo style or flag 'color'"),
    ],
)
def test_bad_values_raise_an_error_naming_the_allowed_values(spec: str, fragment: str) -> None:
    with pytest.raises(XoOptionError) as info:
        parse_libxo(spec)
    message = str(info.value)
    assert fragment in message
    if "unknown" in fragment:
        assert "styles: text, xml, json, html" in message
        assert "pretty, warn, keys, units, underscores" in message


@pytest.mark.parametrize("argv", [["--libxo", "xml,keys"], ["--libxo=xml,keys"], ["--libxo:Xk"]])
def test_the_argument_accepts_all_three_spellings_on_a_subcommand(argv: list[str]) -> None:
    parser, _ = parser_with_subcommand()
    args = parser.parse_args(["show", *argv, "file.pcap"])
    assert libxo_from_args(args, environ={}) == XoOptions(style="xml", keys=True, underscores=True)
    assert args.path == "file.pcap"


def test_without_the_argument_the_style_is_text() -> None:
    parser, _ = parser_with_subcommand()
    assert libxo_from_args(parser.parse_args(["show"]), environ={}) == COMMAND_DEFAULTS


def test_commands_write_json_names_with_underscores_and_the_library_keeps_libxo_hyphens() -> None:
    parser, _ = parser_with_subcommand()
    args = parser.parse_args(["show", "--libxo", "json", "file.pcap"])
    assert libxo_from_args(args, environ={}).underscores is True
    assert parse_libxo("json").underscores is False


def test_libxo_options_from_the_environment_combine_with_the_command_line() -> None:
    parser, _ = parser_with_subcommand()
    args = parser.parse_args(["show", "--libxo", "json"])
    assert libxo_from_args(args, environ={"LIBXO_OPTIONS": "pretty,warn"}) == XoOptions(
        style="json", pretty=True, warn=True, underscores=True
    )
    assert options_from_env({"LIBXO_OPTIONS": "flush-line,underscores"}) == XoOptions(flush_line=True, underscores=True)


def test_the_environment_may_not_choose_a_style() -> None:
    with pytest.raises(XoOptionError, match="LIBXO_OPTIONS: 'json' is not allowed here"):
        options_from_env({"LIBXO_OPTIONS": "json"})


def test_a_bad_value_prints_one_line_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    parser, _ = parser_with_subcommand()
    args = parser.parse_args(["show", "--libxo", "yaml"])
    with pytest.raises(SystemExit) as info:
        libxo_from_args(args, environ={})
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("nettrail: unknown --libxo style or flag 'yaml' (styles: text, xml, json, html;")


def test_a_program_exits_2_on_a_bad_style_or_environment() -> None:
    program = textwrap.dedent(
        """
        import argparse, sys
        from xo import Writer, add_libxo_argument, libxo_from_args
        p = argparse.ArgumentParser()
        add_libxo_argument(p)
        with Writer(sys.stdout, libxo_from_args(p.parse_args())) as w:
            w.emit("{:n/%u}\\n", n=1)
        """
    )
    cases = [
        (["--libxo:J"], {}, 0, '{"n":1}\n'),
        (["--libxo", "bogus"], {}, 2, ""),
        (["--libxo", "json"], {"LIBXO_OPTIONS": "xml"}, 2, ""),
    ]
    for argv, env, status, stdout in cases:
        proc = subprocess.run(
            [sys.executable, "-c", program, *argv],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={"PYTHONPATH": str(ROOT), **env},
            timeout=60,
        )
        assert (proc.returncode, proc.stdout) == (status, stdout), proc.stderr
        assert proc.stderr.count("\n") == (0 if status == 0 else 1)

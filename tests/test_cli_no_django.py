"""`nettrail analyze` and `nettrail collect` start and run without Django (docs/architecture.md).

The import-linter contracts in pyproject.toml say which modules may import Django; this
checks the run-time half of the promise: the database commands import it lazily, so a
whole `analyze` run (and the agent's command line) leaves no Django, Channels or webapp
module loaded. The negative case (`analyze --store`) proves the check can see Django.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.tcpbuild import A, Conv

PROBE = """
import sys
from nettrail.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as exc:  # --help exits through argparse
    status = exc.code
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"django", "channels", "daphne", "webapp"})
print("STATUS", status, file=sys.stderr)
print("LOADED", ",".join(loaded), file=sys.stderr)
"""


def probe(*argv: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> tuple[str, str, str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120, cwd=cwd, env=env
    )
    lines = dict(line.split(" ", 1) for line in proc.stderr.splitlines() if line.startswith(("STATUS ", "LOADED ")))
    assert "STATUS" in lines, proc.stderr
    return lines["STATUS"], lines.get("LOADED", ""), proc.stdout


def capture(tmp_path: Path) -> Path:
    c = Conv()
    c.handshake()
    c.send(A, "PA", b"x" * 100)
    return c.write(tmp_path / "one.pcap")


def test_analyze_runs_without_loading_django(tmp_path: Path) -> None:
    status, loaded, out = probe("analyze", str(capture(tmp_path)), "--libxo", "json")
    assert (status, loaded) == ("0", "")
    assert json.loads(out)["analyze"]["totals"]["connections_tcp"] == 1


def test_the_agent_and_capture_commands_parse_without_loading_django() -> None:
    for command in ("collect", "capture", "alerts"):
        assert probe(command, "--help")[:2] == ("0", ""), command


def test_analyze_store_is_where_django_comes_in(tmp_path: Path) -> None:
    env = dict(os.environ, NETTRAIL_DATA=str(tmp_path / "data"))
    status, loaded, _ = probe("analyze", str(capture(tmp_path)), "--store", env=env)
    assert status == "0"
    assert {"django", "webapp"} <= set(loaded.split(",")), loaded

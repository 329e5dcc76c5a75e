"""Benchmark: `nettrail analyze` of a 10-packet capture beside `tshark -q -z expert` on the same file.

Issue 17 item 7: over hundreds of small captures nettrail paid about a second per run
before the first packet. This runs each contender N times, interleaved, as its own
process on one 10-packet capture (a clean HTTP-like exchange built with scapy), and
records the median wall time and the median CPU time (user + system, from wait4) of
each, their ratio, and whether nettrail stays under the 0.3 s wall target. The
contenders: nettrail as it is, nettrail at an earlier revision (``--before REV``,
extracted with `git archive`, run from its own tree with the same interpreter), tshark,
and a bare `python -c pass` (the interpreter's own floor).

Both trees are byte-compiled first (`compileall`, as `pip install` does for an installed
package): this machine's sessions run with PYTHONDONTWRITEBYTECODE=1, so without that step
every run would compile nettrail's modules from source (about 0.1 s more), a cost no
installed nettrail pays.

Where the time goes: `python -X importtime -m nettrail analyze small.pcap` run N times
per tree; each module's own (self) import time is added to its group (numpy, msgspec,
xo, translators, analysis.*, ...) and the median over the runs is tabled, before and
after. Which modules load is pinned by tests/test_analyze_startup.py (an identity, not a
timing). Results go to docs/benchmarks.md under "## Start-up on a small capture".

Usage: python bench/run.py startup [-- --runs N] [--before REV] [--style json] [--no-write]
Keep in sync with: docs/benchmarks.md (its section), tests/test_analyze_startup.py.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
from doc_section import DOC, write_section  # noqa: E402

SECTION = "## Start-up on a small capture"
TARGET_S = 0.3
# Import-time groups, by module name prefix (first match wins); the rest is the standard library.
GROUPS = (
    ("numpy", "numpy"), ("msgspec", "msgspec"), ("xo", "xo (formatter)"), ("translators", "translators"),
    ("analysis.capture", "analysis.capture"), ("analysis.flows", "analysis.flows"),
    ("analysis.alerts", "analysis.alerts"), ("analysis", "analysis"), ("collector", "collector (--server flags)"),
    ("nettrail", "nettrail (CLI)"), ("__editable__", "editable-install finder (dev venv only)"),
)  # fmt: skip
OTHER = "standard library and the rest"


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """-> (wall seconds, CPU seconds) of one child process; its output is discarded."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd, env=env)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"bench_startup: {' '.join(cmd[:4])} ... failed")
    return wall, usage.ru_utime + usage.ru_stime


PACKAGES = ("nettrail", "analysis", "translators", "xo", "collector")


def compile_tree(tree: Path) -> None:
    subprocess.run([sys.executable, "-m", "compileall", "-q", *PACKAGES], cwd=tree, check=True, capture_output=True)


def small_capture(path: Path) -> Path:
    from tests.test_analyze_startup import ten_packets

    return ten_packets(path)


def tree_env(tree: Path) -> dict[str, str]:
    """Run a tree's nettrail from the tree itself (PYTHONPATH wins over the venv's editable install)."""
    return {**os.environ, "PYTHONPATH": str(tree)}


def contenders(path: Path, style: str, before: Path | None) -> dict[str, tuple[list[str], Path]]:
    analyze = [sys.executable, "-m", "nettrail", "analyze", str(path), "--libxo", style]
    tools = {"nettrail": (analyze, ROOT)}
    if before is not None:
        tools["nettrail before"] = (analyze, before)
    tools["tshark"] = (["tshark", "-n", "-r", str(path), "-q", "-z", "expert"], ROOT)
    tools["python -c pass"] = ([sys.executable, "-c", "pass"], ROOT)
    return tools


def measure(tools: dict[str, tuple[list[str], Path]], runs: int) -> dict[str, list[tuple[float, float]]]:
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in tools}
    for _ in range(runs):  # interleaved: every contender sees the same moments of a shared machine
        for name, (cmd, tree) in tools.items():
            samples[name].append(timed(cmd, tree, tree_env(tree)))
    return samples


def group_of(module: str) -> str:
    for prefix, label in GROUPS:
        if module == prefix or module.startswith(prefix + ".") or module.startswith(prefix + "_"):
            return label
    return OTHER


def import_times(path: Path, style: str, tree: Path, runs: int) -> dict[str, float]:
    """Median over runs of each group's summed self import time (seconds), and the total."""
    cmd = [sys.executable, "-X", "importtime", "-m", "nettrail", "analyze", str(path), "--libxo", style]
    per_run: list[dict[str, float]] = []
    for _ in range(runs):
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tree, env=tree_env(tree), check=True)
        groups: dict[str, float] = {}
        for line in proc.stderr.splitlines():
            if not line.startswith("import time:") or "self [us]" in line:
                continue
            self_us, _cumulative, name = line.removeprefix("import time:").split("|")
            label = group_of(name.strip())
            groups[label] = groups.get(label, 0.0) + int(self_us) / 1e6
        groups["total"] = sum(groups.values())
        per_run.append(groups)
    labels = {label for run in per_run for label in run}
    return {label: statistics.median(run.get(label, 0.0) for run in per_run) for label in labels}


def median_pair(got: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(w for w, _ in got), statistics.median(c for _, c in got)


def report(
    runs: int, style: str, samples: dict[str, list[tuple[float, float]]], imports: dict[str, dict[str, float]],
    loads: tuple[float, float], before: str | None,
) -> list[str]:  # fmt: skip
    med = {name: median_pair(got) for name, got in samples.items()}
    nt_wall, nt_cpu = med["nettrail"]
    ts_wall, ts_cpu = med["tshark"]
    lines = [
        f"Measured {datetime.date.today().isoformat()} with `python bench/run.py startup` on the 2-core development",
        f"machine (load average {loads[0]:.1f} at the start of the run, {loads[1]:.1f} at the end; other engineers'",
        f"work running). One 10-packet capture (a clean HTTP-like exchange built with scapy); each contender {runs}",
        "times, interleaved, as its own process; medians of the wall time and of the CPU time (user + system).",
        "Both nettrail trees byte-compiled first, as an installed package is (the sessions here set",
        "PYTHONDONTWRITEBYTECODE=1: without the .pyc files every run compiles the modules again, about 0.1 s).",
        "",
        "| contender | wall time (median) | min – max | CPU time (median) | nettrail / contender (wall, CPU) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, (wall, cpu) in med.items():
        walls = [w for w, _ in samples[name]]
        label = {
            "nettrail": f"`nettrail analyze small.pcap --libxo {style}`",
            "nettrail before": f"the same at {before} (before this work)",
            "tshark": "`tshark -n -r small.pcap -q -z expert`",
            "python -c pass": "`python -c pass` (the interpreter alone)",
        }[name]
        ratio = "–" if name == "nettrail" else f"{nt_wall / wall:.2f}x, {nt_cpu / cpu:.2f}x"
        lines.append(
            f"| {label} | {wall * 1000:.0f} ms | {min(walls) * 1000:.0f} – {max(walls) * 1000:.0f} ms "
            f"| {cpu * 1000:.0f} ms | {ratio} |"
        )
    lines += [
        "",
        f"Target: under {TARGET_S} s wall for nettrail: {'met' if nt_wall < TARGET_S else 'NOT met'} in this run "
        f"(median {nt_wall * 1000:.0f} ms; tshark {ts_wall * 1000:.0f} ms, nettrail/tshark "
        f"{nt_wall / ts_wall:.2f}x wall, {nt_cpu / ts_cpu:.2f}x CPU).",
        "",
        "Import time by group (`python -X importtime`, each module's own time added to its group; median of the runs):",
        "",
    ]
    trees = list(imports)
    lines.append("| group | " + " | ".join(trees) + " |")
    lines.append("| --- |" + " ---: |" * len(trees))
    labels = sorted(
        {g for t in trees for g in imports[t]} - {"total"}, key=lambda g: -max(imports[t].get(g, 0) for t in trees)
    )
    for label in [*labels, "total"]:
        cells = " | ".join(f"{imports[t].get(label, 0.0) * 1000:.1f} ms" for t in trees)
        lines.append(f"| {'**total**' if label == 'total' else label} | {cells} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_startup")
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--import-runs", type=int, default=7)
    parser.add_argument("--before", metavar="REV", help="also measure nettrail at this git revision")
    parser.add_argument("--style", default="json", choices=("json", "text", "xml", "html"))
    parser.add_argument("--no-write", action="store_true", help="print only, leave docs/benchmarks.md alone")
    args = parser.parse_args(argv)
    if not shutil.which("tshark"):
        print("bench_startup: needs tshark", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="ntstart") as tmp:
        before: Path | None = None
        if args.before:
            before = Path(tmp) / "before"
            before.mkdir()
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before], capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", str(before)], input=archive.stdout, check=True)
        for tree in (ROOT, before):
            if tree is not None:
                compile_tree(tree)
        path = small_capture(Path(tmp) / "small.pcap")
        loads = (os.getloadavg()[0], 0.0)
        samples = measure(contenders(path, args.style, before), args.runs)
        imports = {}
        if before is not None:
            imports[f"before ({args.before})"] = import_times(path, args.style, before, args.import_runs)
        imports["now"] = import_times(path, args.style, ROOT, args.import_runs)
        loads = (loads[0], os.getloadavg()[0])
    body = report(args.runs, args.style, samples, imports, loads, args.before)
    print("\n".join([SECTION, "", *body]))
    if not args.no_write:
        write_section(SECTION, body)
        print(f"written to {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark runner: `python bench/run.py [NAME...] [-- ARGS...]` runs bench/bench_*.py.

Each benchmark module defines `main(argv)`, prints its own figures (rates and the ratio
against a peer measured in the same run) and returns an exit status. NAME selects
modules (`xo`, `bench_xo` or `bench_xo.py`); no NAME runs them all. Arguments after `--`
are passed to every selected benchmark's main(). Benchmarks are never run by pytest.
Keep in sync with: bench/bench_*.py (the main() contract) and docs/benchmarks.md.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import time
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


def discover() -> dict[str, Path]:
    return {p.stem.removeprefix("bench_"): p for p in sorted(BENCH.glob("bench_*.py"))}


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def select(names: list[str], available: dict[str, Path]) -> list[str]:
    if not names:
        return list(available)
    chosen = []
    for name in names:
        short = name.removesuffix(".py").removeprefix("bench_")
        if short not in available:
            raise SystemExit(f"bench/run.py: no benchmark {name!r} (available: {', '.join(available)})")
        chosen.append(short)
    return chosen


def run_one(path: Path, argv: list[str]) -> int:
    module = load(path)
    main = getattr(module, "main", None)
    if main is None:
        print(f"{path.name}: no main()", file=sys.stderr)
        return 1
    takes_argv = bool(inspect.signature(main).parameters)
    status = main(argv) if takes_argv else main()
    return int(status or 0)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    passthrough: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, passthrough = args[:cut], args[cut + 1 :]
    sys.path.insert(0, str(ROOT))
    available = discover()
    results: list[tuple[str, int, float]] = []
    for name in select(args, available):
        print(f"== {name} ({available[name].name})", flush=True)
        start = time.perf_counter()
        try:
            status = run_one(available[name], passthrough)
        except Exception as exc:  # one broken benchmark must not hide the others' figures
            print(f"{name}: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            status = 1
        results.append((name, status, time.perf_counter() - start))
        print(flush=True)
    print("== summary")
    for name, status, seconds in results:
        print(f"{name:<16} {'ok' if status == 0 else f'exit {status}':<8} {seconds:8.1f} s")
    return 0 if all(status == 0 for _, status, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())

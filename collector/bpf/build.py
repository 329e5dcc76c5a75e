"""Build kmod/nettrail.bpf.o when missing or older than its sources (runs `make -C kmod`).

Lets tests and `nettrail collect` work from a fresh clone. The Makefile owns the
compiler flags, the list of .bpf.c files linked into the object and the tool checks;
this runs its `check` target first, as `make -C kmod` does, and passes its one-line
"<tool> not found: apt-get install ..." message on.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

KMOD_DIR = Path(os.environ.get("NETTRAIL_KMOD_DIR", Path(__file__).resolve().parents[2] / "kmod"))
OBJECT = "nettrail.bpf.o"
HINT = "apt-get install make clang llvm libbpf-dev bpftool"


class BuildError(RuntimeError):
    """The eBPF object could not be built; the message says what is missing."""


def object_path(name: str = OBJECT) -> Path:
    return KMOD_DIR / name


def sources() -> list[Path]:
    """Every file the object is built from: the C sources and headers, and the Makefile."""
    found = [*KMOD_DIR.glob("*.bpf.c"), *KMOD_DIR.glob("*.bpf.h")]
    return [*found, KMOD_DIR / "nettrail.h", KMOD_DIR / "Makefile"]


def is_stale(obj: Path) -> bool:
    if not obj.exists():
        return True
    built = obj.stat().st_mtime
    return any(s.exists() and s.stat().st_mtime > built for s in sources())


def ensure_built(name: str = OBJECT) -> Path:
    """The path of an up-to-date object, building it first if needed."""
    obj = object_path(name)
    if not is_stale(obj):
        return obj
    if shutil.which("make") is None:
        raise BuildError(f"make not found: {HINT}")
    KMOD_DIR.mkdir(exist_ok=True)
    # Several processes may start at once (parallel tests): build one at a time.
    with open(KMOD_DIR / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_stale(obj):
            _make(name)
    return obj


def _make(name: str) -> None:
    # `check` first, as `make -C kmod` (target all) does: a missing clang is named with
    # its package, not reported as "/bin/sh: 1: clang: not found".
    proc = subprocess.run(
        ["make", "-s", "-C", str(KMOD_DIR), "check", name], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        first = next((ln for ln in lines if "not found" in ln), None)
        raise BuildError(first or f"building kmod/{name} failed: " + " | ".join(lines[-5:]))

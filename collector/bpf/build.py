"""Build kmod/*.bpf.o when missing or older than its sources (runs `make -C kmod`).

Lets tests and `nettrail collect` work from a fresh clone. Keep the object list in
sync with kmod/Makefile (OBJS); the Makefile owns the compiler flags and the
one-line "<tool> not found: apt-get install ..." messages, which are passed on.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

KMOD_DIR = Path(os.environ.get("NETTRAIL_KMOD_DIR", Path(__file__).resolve().parents[2] / "kmod"))
SOURCES = ("tcp.bpf.c", "nettrail.h", "Makefile")


class BuildError(RuntimeError):
    """The eBPF object could not be built; the message says what is missing."""


def object_path(name: str = "tcp.bpf.o") -> Path:
    return KMOD_DIR / name


def is_stale(obj: Path) -> bool:
    if not obj.exists():
        return True
    built = obj.stat().st_mtime
    return any((KMOD_DIR / s).exists() and (KMOD_DIR / s).stat().st_mtime > built for s in SOURCES)


def ensure_built(name: str = "tcp.bpf.o") -> Path:
    """The path of an up-to-date object, building it first if needed."""
    obj = object_path(name)
    if not is_stale(obj):
        return obj
    if shutil.which("make") is None:
        raise BuildError("make not found: apt-get install make clang llvm libbpf-dev bpftool")
    KMOD_DIR.mkdir(exist_ok=True)
    # Several processes may start at once (parallel tests): build one at a time.
    with open(KMOD_DIR / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_stale(obj):
            _make(name)
    return obj


def _make(name: str) -> None:
    proc = subprocess.run(["make", "-s", "-C", str(KMOD_DIR), name], capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        first = next((ln for ln in lines if "not found" in ln), None)
        raise BuildError(first or f"building kmod/{name} failed: " + " | ".join(lines[-5:]))

"""Which tracepoints this kernel has, checked before anything is loaded (H3 attach coverage).

A ``tp_btf`` program attaches to the tracepoint's BTF typedef ``btf_trace_<name>``; the
tracepoint also shows up as an event directory ``<tracefs>/events/<system>/<name>``
(every program in loader.PROGRAMS is a TRACE_EVENT, so it has both). A tracepoint
missing from either is absent: its program is not loaded (loading it would fail the
whole object) and the rules that need it are reported unavailable.

tracefs is ``$NETTRAIL_TRACEFS`` if set (a kernel mounted elsewhere), else
/sys/kernel/tracing, else /sys/kernel/debug/tracing; when none has an ``events``
directory the check relies on BTF alone. Keep in sync with loader.PROGRAMS and
docs/collector.md ("Attach coverage").
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from collector.bpf import btf

TRACEFS_ENV = "NETTRAIL_TRACEFS"
TRACEFS_DIRS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")


def tracefs_root(env: Mapping[str, str] | None = None) -> Path | None:
    """The tracefs mount whose events/ directory lists the tracepoints, or None."""
    env = os.environ if env is None else env
    chosen = env.get(TRACEFS_ENV)
    for root in (chosen,) if chosen else TRACEFS_DIRS:
        if Path(root, "events").is_dir():
            return Path(root)
    return None


def tracefs_events(root: Path) -> set[str]:
    """Names of every tracepoint under <root>/events/<system>/<name>."""
    out: set[str] = set()
    for system in (root / "events").iterdir():
        if system.is_dir():
            out.update(p.name for p in system.iterdir() if p.is_dir())
    return out


def btf_tracepoints(names: Iterable[str]) -> set[str]:
    """The names among ``names`` whose btf_trace_<name> typedef is in the kernel's BTF."""
    # parsed once per process (btf._vmlinux): under QEMU's TCG one parse takes seconds
    return {n for n in names if btf.tracepoint_args(n) is not None}


def absent(names: Iterable[str], env: Mapping[str, str] | None = None) -> list[str]:
    """Tracepoints among ``names`` this kernel lacks (in the order given)."""
    wanted = list(names)
    present = btf_tracepoints(wanted)
    root = tracefs_root(env)
    if root is not None:
        present &= tracefs_events(root)
    return [n for n in wanted if n not in present]

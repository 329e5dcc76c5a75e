"""The collector's own build (collector/bpf/build.py) runs `make -C kmod`'s checks.

A missing tool is named with the package that provides it, the same line whether the
object is built by `make -C kmod` or by the collector on first use; and the object is
rebuilt when any of the files it is linked from changes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from collector.bpf import build

KMOD = Path(__file__).resolve().parents[1] / "kmod"
HINT = "apt-get install clang llvm libbpf-dev bpftool"
# What the Makefile's recipes call besides the compiler and bpftool.
BASE_TOOLS = ("make", "sh", "uname", "sed", "echo", "test", "mkdir", "mv")

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def kmod_copy(tmp_path: Path) -> Path:
    """The kmod sources without any built file."""
    dst = tmp_path / "kmod"
    dst.mkdir()
    for src in KMOD.iterdir():
        if src.name.endswith((".bpf.c", ".bpf.h")) or src.name in ("nettrail.h", "Makefile"):
            shutil.copy2(src, dst / src.name)
    return dst


def path_with(tmp_path: Path, tools: tuple[str, ...]) -> str:
    """A PATH holding only `tools` (those installed here)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def collector_build_error(kmod: Path, path: str) -> str:
    """What build.ensure_built() raises, run in a process whose PATH is `path`."""
    code = (
        "from collector.bpf import build\n"
        "try:\n    build.ensure_built()\nexcept build.BuildError as e:\n    print(e)\nelse:\n    print('built')\n"
    )
    env = {**os.environ, "PATH": path, "NETTRAIL_KMOD_DIR": str(kmod)}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=KMOD.parent
    )
    return proc.stdout.strip()


def make_error(kmod: Path, path: str) -> str:
    """The first line `make -C kmod` prints on stderr (make's own "Error 1" line follows)."""
    env = {**os.environ, "PATH": path}
    proc = subprocess.run(["make", "-s", "-C", str(kmod)], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    return proc.stderr.splitlines()[0]


def test_a_missing_clang_is_named_with_its_package_by_make_and_by_the_collector(tmp_path: Path) -> None:
    kmod = kmod_copy(tmp_path)
    path = path_with(tmp_path, BASE_TOOLS + ("bpftool",))

    assert make_error(kmod, path) == f"clang not found: {HINT}"
    assert collector_build_error(kmod, path) == f"clang not found: {HINT}"
    assert not (kmod / build.OBJECT).exists()


def test_a_missing_bpftool_is_named_with_its_package_by_make_and_by_the_collector(tmp_path: Path) -> None:
    if shutil.which("clang") is None:
        pytest.skip("needs clang, so that bpftool is the first tool missing")
    kmod = kmod_copy(tmp_path)
    path = path_with(tmp_path, BASE_TOOLS + ("clang",))

    assert make_error(kmod, path) == f"bpftool not found: {HINT}"
    assert collector_build_error(kmod, path) == f"bpftool not found: {HINT}"


def test_the_object_is_stale_when_any_file_it_is_linked_from_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kmod = kmod_copy(tmp_path)
    monkeypatch.setattr(build, "KMOD_DIR", kmod)
    obj = build.object_path()
    obj.write_bytes(b"")
    newer = obj.stat().st_mtime + 10

    assert not build.is_stale(obj)
    for name in ("skb.bpf.c", "core_fixes.bpf.h", "nettrail.h", "Makefile"):
        os.utime(obj, (newer - 20, newer - 20))
        os.utime(kmod / name, (newer, newer))
        assert build.is_stale(obj), name
        os.utime(kmod / name, (newer - 30, newer - 30))
    assert not build.is_stale(obj)


@pytest.mark.parametrize(
    ("machine", "arch"),
    [("x86_64", "x86"), ("aarch64", "arm64"), ("ppc64le", "powerpc"), ("s390x", "s390"), ("riscv64", "riscv")]
    + [("armv7l", "arm"), ("loongarch64", "loongarch"), ("i686", "x86")],
)
def test_the_target_arch_is_the_machine_s_as_bpf_tracing_h_names_it(machine: str, arch: str) -> None:
    proc = subprocess.run(
        [
            "make",
            "-s",
            "-C",
            str(KMOD),
            "--eval",
            "print-cflags: ; @echo $(CFLAGS)",
            "print-cflags",
            f"MACHINE={machine}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    defines = [word for word in proc.stdout.split() if word.startswith("-D__TARGET_ARCH_")]
    assert defines == [f"-D__TARGET_ARCH_{arch}"]


def test_the_build_targets_the_machine_it_runs_on() -> None:
    proc = subprocess.run(
        ["make", "-s", "-C", str(KMOD), "--eval", "print-cflags: ; @echo $(CFLAGS)", "print-cflags"],
        capture_output=True,
        text=True,
        check=True,
    )
    expected = {"x86_64": "x86", "aarch64": "arm64"}.get(os.uname().machine)
    if expected is None:
        pytest.skip(f"no expectation written for {os.uname().machine}")
    assert f"-D__TARGET_ARCH_{expected}" in proc.stdout.split()

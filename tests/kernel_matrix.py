"""Kernel matrix harness: boot Debian's own kernels under QEMU and run the kernel tests inside.

The collector must load on the kernels people run (issue 16), not only on this machine's.
For each kernel of ``KERNELS`` this module

1. resolves the Debian package (``apt-cache``), downloads it with ``apt-get download`` and
   unpacks it with ``dpkg-deb -x`` under ``var/kernels/`` (gitignored; never into /boot);
   another release's kernel (Debian 11's 5.10) through a private sources list and lists
   directory under ``var/kernels/apt/`` (``AptSuite``), the machine's own sources untouched;
2. builds ``kmod/`` on the host (CO-RE: one object for every kernel; the guest sees the
   checkout read-only and has no business rebuilding it);
3. boots it with virtme-ng under QEMU's TCG (``--disable-kvm``: /dev/kvm here is kvm_pvm
   without VMX/SVM, where a stock kernel hangs in its decompressor; ``--force-9p``: the
   generic -amd64 image has 9p, virtiofs needs a daemon), the host's root file system
   shared read-only and one writable results directory;
4. inside the guest mounts what the collector needs (tracefs, bpffs, the package's ``boot/``
   over /boot so libbpf finds ``config-$(uname -r)`` for CONFIG_HZ) and runs the guest's
   tests (every ``matrix`` test and the ``kernel`` tests of ``GUEST_FILES``, as collected on
   the host: ``guest_test_files``) in one pytest process, writing a junit XML, each test's
   outcome as it ends (``progress.tsv``) and, from test_collect_kernel_support, the
   collector's coverage on that kernel (``coverage.json``).
   Under TCG the guest's time goes to starting Python and importing, not to the tests, so:
   a snapshot of the checkout precompiled on the host, no pytest plugin autoload, and
   Python's own trees (its prefix, the venv, the snapshot) as separate 9p shares mounted
   again in the guest with caching (``shared_trees``);
5. reads the results from that directory: ``vng`` exits 255 even when the guest succeeded.

``scripts/kernel-matrix`` runs it by hand; ``tests/test_kernel_matrix.py`` runs it under
pytest, with this module as a plugin: the guests boot when collection ends, overlap the
rest of the suite (at ``GUEST_NICE``), and the matrix tests run last.
Keep the package names in sync with scripts/install-system and docs/collector.md.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("NETTRAIL_KERNEL_CACHE", ROOT / "var" / "kernels"))
# NETTRAIL_MATRIX_RESULTS: another results directory (and snapshot), so two runs at once
# (a 5.10 run beside the default guests) do not delete each other's checkout.
RESULTS = Path(os.environ.get("NETTRAIL_MATRIX_RESULTS", ROOT / "var" / "kernel-matrix"))
# Guest size: QEMU itself takes ~1.4 GB of host memory for this; TCG runs one host thread per vCPU.
GUEST_MEMORY = "1G"
# One vCPU: with two, the 6.12 guest panicked now and then ("Oops: int3" in handle_softirqs,
# 2 runs of 6): a vCPU ran the int3 that text_poke_bp puts in a static branch while a tracepoint
# is switched on or off, after the patch had completed, which real CPUs cannot do (the IPI
# sync in between); multi-threaded TCG can. One vCPU has no other CPU to see it, and both
# guests then take one host CPU each (98 s each instead of 130-200).
GUEST_CPUS = int(os.environ.get("NETTRAIL_MATRIX_CPUS", 1))
GUEST_QEMU_OPTS = os.environ.get("NETTRAIL_MATRIX_QEMU_OPTS", "")
# What the guests run (issue 32 item 2; docs/collector.md, "The kernel matrix", has the
# measured times): every test marked `matrix` (one per provider group with real traffic)
# and the `kernel` tests of GUEST_FILES, each file once it passed inside every default
# guest. Not every `kernel` test: under TCG one costs a guest about 8 s of a host CPU (the
# 6.12 guest, 2026-12-08: 5 min 54 s of QEMU's CPU for its boot, pytest's collection and
# the first 40 kernel tests), so all ~200 would take ~30 CPU-minutes per guest, 90 for the
# three guests, beside a host pass of ~20: past CI's 45 minutes on two cores.
# NETTRAIL_MATRIX_MARK=kernel runs every kernel test (less GUEST_EXCLUDED);
# NETTRAIL_MATRIX_MARK=matrix the `matrix` ones alone.
GUEST_MARK = os.environ.get("NETTRAIL_MATRIX_MARK", "")
GUEST_FILES: tuple[str, ...] = ("tests/test_connection_directions_kernel.py",)
# Node id prefixes never run in a guest, and why.
GUEST_EXCLUDED = {
    "tests/test_kernel_matrix.py": "boots the guests: it runs on the host",
    "tests/browser/": "drive headless Chromium: its multi-process start-up under TCG costs minutes per test",
    # skipped where the machine has one CPU, as the guests have (GUEST_CPUS), and a skip fails a guest's run
    "tests/test_collect_skb_lifecycle.py::test_buffers_read_on_another_cpu": "needs two CPUs",
    "tests/test_collect_detach.py::test_settling_after_a_detach_waits_for_the_runs_begun_before_it": "needs two CPUs",
}
GUEST_PLUGINS = ("pytest_django.plugin", "pytest_asyncio.plugin")
# In a whole-suite run (tests/test_kernel_matrix.py) the guests overlap the host's own tests.
# QEMU keeps the host tests' priority by default. Niced (CFS weight 110 against 1024 at
# nice 10) a guest got ~7% of a CPU beside this machine's busy work (2026-12-08), and with
# ~10% a collector in the guest did not attach within the tests' 120 s bound
# (test_alerts_kernel's recording, on 6.1 and 6.12). NETTRAIL_MATRIX_NICE=10 favours the
# host pass instead; a run of scripts/kernel-matrix alone is never niced.
GUEST_NICE = int(os.environ.get("NETTRAIL_MATRIX_NICE", 0))
# A guest that has not finished by then is killed: a hung boot must not eat CI's 60 minutes.
PANIC = re.compile(r"Kernel panic|Oops|BUG:|Call Trace|general protection fault")
GUEST_TIMEOUT_S = float(os.environ.get("NETTRAIL_MATRIX_TIMEOUT", 40 * 60))
# virtme-ng's writable overlays in the guest: no share may be mounted inside them.
VIRTME_OVERLAYS = ("/etc", "/lib", "/home", "/opt", "/srv", "/usr", "/var", "/tmp")
# What the guest imports from the checkout (precompiled in the snapshot).
PYTHON_PACKAGES = ("collector", "translators", "analysis", "nettrail", "xo", "tests")
SYSTEM_TOOLS = {"qemu-system-x86_64": "qemu-system-x86", "busybox": "busybox-static", "depmod": "kmod"}


@dataclass(frozen=True)
class AptSuite:
    """Another Debian release's archive, read through a private sources list and lists
    directory (and no binary cache): the machine's own sources, lists and cache stay as
    they are. ``suites`` of Debian's own mirror and its security archive."""

    name: str  # e.g. "bullseye"; its files live in CACHE/apt/<name>/
    suites: tuple[tuple[str, str], ...]  # (archive path on the mirror, suite)
    mirror: str = "http://deb.debian.org/"
    keyring: str = "/usr/share/keyrings/debian-archive-keyring.gpg"

    def directory(self) -> Path:
        return CACHE / "apt" / self.name

    def options(self) -> list[str]:
        d = self.directory()
        return [
            *("-o", f"Dir::Etc::sourcelist={d / 'sources.list'}", "-o", "Dir::Etc::sourceparts=-"),
            *(
                "-o",
                f"Dir::State::Lists={d / 'lists'}",
                "-o",
                "Dir::Cache::pkgcache=",
                "-o",
                "Dir::Cache::srcpkgcache=",
            ),
        ]

    def update(self) -> None:
        d = self.directory()
        (d / "lists" / "partial").mkdir(parents=True, exist_ok=True)
        lines = [f"deb [signed-by={self.keyring}] {self.mirror}{path} {suite} main" for path, suite in self.suites]
        (d / "sources.list").write_text("\n".join(lines) + "\n")
        _run(["apt-get", *self.options(), "update", "-qq"])

    def ready(self) -> bool:
        return any((self.directory() / "lists").glob("*_Packages"))


@dataclass(frozen=True)
class Kernel:
    """One Debian kernel of the matrix: ``name`` labels it, ``resolve`` finds its package."""

    name: str
    pattern: str  # regex over `apt-cache search` package names; the newest match is taken
    metapackage: str | None = None  # when set: the image this metapackage depends on
    apt: AptSuite | None = None  # another release's archive (None: the machine's own sources)

    def apt_options(self) -> list[str]:
        if self.apt is None:
            return []
        if not self.apt.ready():
            self.apt.update()
        return self.apt.options()

    def update(self) -> None:
        """Refresh the lists this kernel's package is found in."""
        if self.apt is None:
            _run(["apt-get", "update", "-qq"])
        else:
            self.apt.update()

    def package(self) -> str:
        """The exact -unsigned image package (the signed one only wraps it with a shim signature)."""
        if self.metapackage:
            out = _run(["apt-cache", *self.apt_options(), "depends", self.metapackage])
            dep = re.search(r"Depends: (linux-image-\S+)", out)
            if dep:
                return dep.group(1) + "-unsigned"
        # apt-cache's regex is POSIX (no \d): search by the fixed prefix, match here
        prefix = re.match(r"[\w-]+", self.pattern.replace("\\.", "."))
        query = f"^{prefix.group(0) if prefix else self.pattern}"
        out = _run(["apt-cache", *self.apt_options(), "search", "--names-only", query])
        names = [line.split()[0] for line in out.splitlines() if re.fullmatch(self.pattern, line.split()[0])]
        if not names:
            raise HarnessError(f"no Debian package matches {self.pattern} (apt-get update?)")
        return sorted(names, key=_version_key)[-1]


# Debian 11's archive: its kernel's security updates are in bullseye-security.
BULLSEYE = AptSuite("bullseye", (("debian", "bullseye"), ("debian-security", "bullseye-security")))
# Debian 12's default kernel (what linux-image-amd64 points to), its 6.12 backport, and
# Debian 11's kernel (what its linux-image-amd64 points to; Amazon Linux 2 and Cilium's
# floor are 5.10 too). Generic -amd64 images only: the -cloud ones have no 9p.
KERNELS = (
    Kernel("6.1", r"linux-image-6\.1\.0-\d+-amd64-unsigned", metapackage="linux-image-amd64"),
    Kernel("6.12", r"linux-image-6\.12\.\d+\+deb12-amd64-unsigned"),
    Kernel("5.10", r"linux-image-5\.10\.0-\d+-amd64-unsigned", metapackage="linux-image-amd64", apt=BULLSEYE),
)
# Kernels booted only when asked by name (NETTRAIL_MATRIX_KERNELS=...): none today.
OPTIONAL_KERNELS: tuple[Kernel, ...] = ()


class HarnessError(RuntimeError):
    """The harness itself could not run a guest (missing tool, no package, no result)."""


@dataclass
class GuestRun:
    """What one guest run left in its results directory."""

    kernel: str
    release: str
    rwdir: Path
    seconds: float
    returncode: int | None  # pytest's exit code inside the guest; None: the guest never got there
    log: str
    junit: ElementTree.Element | None
    coverage: dict[str, object] = field(default_factory=dict)
    # set when an earlier boot of this guest died before its tests finished with no
    # panic on its console and it was booted once more: what that boot left
    earlier_death: str | None = None

    def failures(self) -> list[str]:
        """'test id: message' of every failed or erroring test case of the junit XML."""
        out = []
        for case in [] if self.junit is None else self.junit.iter("testcase"):
            for bad in list(case.findall("failure")) + list(case.findall("error")):
                text = (bad.text or bad.get("message") or "").strip()
                out.append(f"{case.get('classname')}::{case.get('name')}: {text[-3000:]}")
        return out

    def failed_tests(self) -> dict[str, str]:
        """test function name -> its failure text."""
        out = {}
        for case in [] if self.junit is None else self.junit.iter("testcase"):
            for bad in list(case.findall("failure")) + list(case.findall("error")):
                name = str(case.get("name")).split("[")[0]
                out[name] = f"{case.get('classname')}::{case.get('name')}: {(bad.text or '').strip()[-3000:]}"
        return out

    def counts(self) -> dict[str, int]:
        if self.junit is None:
            return {}
        suite = self.junit if self.junit.tag == "testsuite" else self.junit.find("testsuite")
        assert suite is not None
        return {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}


def _version_key(name: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", name)]


def _run(cmd: list[str], cwd: Path | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise HarnessError(f"{shlex.join(cmd)} failed: {(proc.stderr or proc.stdout).strip()[-500:]}")
    return proc.stdout


def missing_tools() -> str | None:
    """Why a guest cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (the guest loads eBPF as root; apt-get download)"
    if shutil.which("vng", path=_path()) is None:
        return "virtme-ng not installed (scripts/python-env test)"
    missing = [pkg for tool, pkg in SYSTEM_TOOLS.items() if shutil.which(tool, path=_path()) is None]
    if missing:
        return f"missing Debian packages {' '.join(missing)} (scripts/install-system)"
    return None


def _path() -> str:
    # vng runs virtme-run, and depmod lives in /usr/sbin: both must be on PATH.
    return os.pathsep.join([str(Path(sys.executable).parent), "/usr/sbin", "/sbin", os.environ.get("PATH", "")])


def fetch(kernel: Kernel) -> Path:
    """The unpacked package of this kernel under CACHE (downloaded and unpacked once)."""
    cached = sorted(CACHE.glob(f"{kernel.name}-*/boot/vmlinuz-*"))
    try:
        package = kernel.package()
    except HarnessError:
        if cached:  # offline, or apt lists not fetched yet: the last one unpacked will do
            return cached[-1].parents[1]
        raise
    tree = CACHE / f"{kernel.name}-{package}"
    if list(tree.glob("boot/vmlinuz-*")):
        return tree
    debs = CACHE / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    # apt drops privileges to _apt for downloads; a directory it cannot write only warns.
    try:
        _run(["apt-get", *kernel.apt_options(), "download", "-q", package], cwd=debs)
    except HarnessError:  # lists older than the archive (the file moved on): refresh once
        kernel.update()
        package = kernel.package()
        tree = CACHE / f"{kernel.name}-{package}"
        _run(["apt-get", *kernel.apt_options(), "download", "-q", package], cwd=debs)
    deb = sorted(debs.glob(f"{package}_*.deb"))[-1]
    partial = tree.with_name(tree.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    _run(["dpkg-deb", "-x", str(deb), str(partial)])
    partial.rename(tree)
    deb.unlink()  # 70-110 MB each; the unpacked tree is what is reused
    return tree


def snapshot() -> Path:
    """A copy of the checkout (tracked and new files, and the built kmod objects) for the
    guests: what they run does not change under them while someone edits the worktree.
    The host's .venv is used as it is (its editable install is shadowed: the guest runs
    from the copy's directory, first on sys.path)."""
    listed = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT)
    files = [f for f in listed.split("\0") if f and (ROOT / f).is_file()]
    files += [str(p.relative_to(ROOT)) for p in (ROOT / "kmod").glob("*.bpf.o")]
    dest = RESULTS / "checkout"
    shutil.rmtree(dest, ignore_errors=True)
    for name in files:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest / name)  # keeps mtimes: the objects stay newer than their sources
    # Compiled here, in seconds: the guest compiles nothing (it runs with
    # PYTHONDONTWRITEBYTECODE on a read-only share, and compiling under TCG costs minutes).
    # The pycs name their source's mtime and size, which copy2 kept.
    _run([sys.executable, "-m", "compileall", "-q", "-j", "0", *PYTHON_PACKAGES], cwd=dest)
    return dest


def shared_trees(checkout: Path) -> list[Path]:
    """What the guest's Python reads: its installation, the venv and the snapshot. Not a
    tree virtme-ng overlays in the guest (/usr, /opt, /home...: a system Python stays on the
    root share)."""
    trees = [Path(sys.base_prefix), ROOT / ".venv", checkout]
    return [
        t for t in trees if t != Path("/") and not any(t == Path(o) or Path(o) in t.parents for o in VIRTME_OVERLAYS)
    ]


def guest_selected(nodeid: str, marks: set[str]) -> bool:
    """Whether a guest runs this test (GUEST_MARK, GUEST_FILES, GUEST_EXCLUDED)."""
    if any(nodeid.startswith(prefix) for prefix in GUEST_EXCLUDED):
        return False
    if GUEST_MARK:
        return GUEST_MARK in marks
    return "matrix" in marks or ("kernel" in marks and nodeid.split("::")[0] in GUEST_FILES)


@functools.cache
def guest_test_files(checkout: Path) -> tuple[list[str], list[str]]:
    """(files, node ids to deselect there) of the tests the guests run, as pytest collects
    them on the host in the snapshot (a marker may come from a helper module's list, so the
    files' text does not say). Only these files are imported in the guest: imports are slow
    under TCG."""
    listing = RESULTS / "collected.tsv"
    listing.unlink(missing_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "tests.kernel_matrix"]
        + ["-m", "kernel or matrix", "tests"],
        cwd=checkout,
        capture_output=True,
        text=True,
        env=dict(
            os.environ, NETTRAIL_KERNEL_MATRIX="0", NETTRAIL_MATRIX_LIST=str(listing), PYTHONDONTWRITEBYTECODE="1"
        ),
    )
    if proc.returncode != 0 or not listing.exists():
        raise HarnessError(f"collecting the kernel tests failed: {(proc.stderr or proc.stdout)[-1500:]}")
    marks = {line.split("\t")[0]: set(line.split("\t")[1].split(",")) for line in listing.read_text().splitlines()}
    kept = {nodeid for nodeid, m in marks.items() if guest_selected(nodeid, m)}
    files = sorted({nodeid.split("::")[0] for nodeid in kept})
    deselect = [nodeid for nodeid in marks if nodeid not in kept and nodeid.split("::")[0] in files]
    if not files:
        raise HarnessError("no test selected for the guests")
    return files, deselect


def guest_script(tree: Path, rwdir: Path, tests: list[str], checkout: Path, deselect: tuple[str, ...] = ()) -> str:
    boot = tree / "boot"
    shared = shared_trees(checkout)
    py = ROOT / ".venv" / "bin" / "python"
    # No plugin autoload: finding the entry points reads every installed distribution's
    # metadata over 9p; the two plugins kernel tests use (Django's test database for a
    # connection's directions, asyncio for nettrail up's websocket) are named. Other
    # plugins' ini options then only warn, so that is muted.
    pytest_cmd = [str(py), "-u", "-m", "pytest", "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestConfigWarning"]
    for plugin in GUEST_PLUGINS:
        pytest_cmd += ["-p", plugin]
    pytest_cmd += [
        "-p",
        "tests.kernel_matrix",
        "-m",
        "kernel or matrix",
        "-v",
        "-rfE",
        "--durations=0",
        f"--junitxml={rwdir}/junit.xml",
    ]
    for nodeid in deselect:
        pytest_cmd += ["--deselect", nodeid]
    pytest_cmd += tests
    return f"""#!/bin/bash
# Runs inside the guest (as root); everything it leaves is in {rwdir}.
exec >{rwdir}/guest.log 2>&1
set -x
uname -r > {rwdir}/release
# the guest kernel's BTF, to read its prototypes on the host (bpftool btf dump file)
cp /sys/kernel/btf/vmlinux {rwdir}/vmlinux.btf || true
ip link set lo up
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
[ -d /sys/kernel/tracing/events ] || mount -t tracefs nodev /sys/kernel/tracing
mount --bind {boot} /boot
# The trees Python reads (its prefix, the venv, the snapshot) are 9p shares of their own
# (--rodir): mounted again with the page and dentry caches (cache=loose), each file is
# fetched once instead of at every open, stat and page fault (the root share has no
# cache). They do not change while the guest runs. A failed mount leaves the root's view.
cd /
for dir in {" ".join(shlex.quote(str(d)) for d in shared)}; do
  tag=$(awk -v d="$dir" '$2 == d && $3 == "9p" {{print $1}}' /proc/mounts)
  [ -n "$tag" ] && umount "$dir" && mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=524288,cache=loose "$tag" "$dir"
done
cd {checkout}
export PYTHONDONTWRITEBYTECODE=1 HOME=/tmp PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
export NETTRAIL_MATRIX_OUT={rwdir}
set +x
start=$(date +%s)
{shlex.join(pytest_cmd)}
echo $? > {rwdir}/rc
echo "guest total: $(( $(date +%s) - start )) s"
"""


def prepare() -> Path:
    """Build the kmod objects on the host (against its BTF: CO-RE relocates them on each
    kernel; the guest's checkout is read-only) and snapshot the checkout."""
    from collector.bpf import build, variants

    for name in variants.OBJECTS:
        build.ensure_built(name)
    return snapshot()


def start(kernel: Kernel, checkout: Path, nice: int = 0) -> tuple[subprocess.Popen[str], Path, float]:
    """Boot this kernel's guest in the background: (vng process, results directory, start time)."""
    why = missing_tools()
    if why:
        raise HarnessError(why)
    tree = fetch(kernel)
    vmlinuz = sorted(tree.glob("boot/vmlinuz-*"))[-1]
    rwdir = RESULTS / kernel.name
    shutil.rmtree(rwdir, ignore_errors=True)
    rwdir.mkdir(parents=True)
    (rwdir / "checkout").write_text(str(checkout))  # for a second boot (finish)
    script = rwdir / "guest.sh"
    # NETTRAIL_MATRIX_PROBE_ONLY=1: only the coverage test (does everything load?)
    probe_only = os.environ.get("NETTRAIL_MATRIX_PROBE_ONLY")
    # NETTRAIL_MATRIX_TESTS="tests/x.py::test_y ...": only these (while debugging one)
    only = (
        ["tests/test_collect_kernel_support.py"] if probe_only else os.environ.get("NETTRAIL_MATRIX_TESTS", "").split()
    )
    tests, deselect = (only, []) if only else guest_test_files(checkout)
    script.write_text(guest_script(tree, rwdir, tests, checkout, tuple(deselect)))
    script.chmod(0o755)
    # --verbose: the guest kernel's console goes to console.log, so a guest that dies
    # (a panic reboots it, and QEMU exits) leaves its last words
    cmd = [
        *(("nice", "-n", str(nice)) if nice else ()),
        "vng",
        "--verbose",
        "--run",
        str(vmlinuz),
        "--disable-kvm",
        "--force-9p",
        "--memory",
        GUEST_MEMORY,
    ]
    cmd += ["--cpus", str(GUEST_CPUS), "--rwdir", str(rwdir), "--exec", str(script)]
    if GUEST_QEMU_OPTS:
        cmd.append(f"--qemu-opts={GUEST_QEMU_OPTS}")
    for tree_ in shared_trees(checkout):
        cmd += ["--rodir", str(tree_)]
    env = dict(os.environ, PATH=_path())
    proc = subprocess.Popen(
        cmd,
        cwd=RESULTS,  # the guest starts there: not inside a share it mounts again
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: stop() ends QEMU too, not only vng
    )
    return proc, rwdir, time.monotonic()


def stop(proc: subprocess.Popen[str]) -> str:
    """Kill a guest: vng and what it started (virtme-run, QEMU), its whole process group;
    killing vng alone leaves QEMU running. Returns what it printed."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    console, _ = proc.communicate()
    return console or ""


def finish(kernel: Kernel, proc: subprocess.Popen[str], rwdir: Path, started: float, retry: bool = True) -> GuestRun:
    """Wait for the guest (killed after GUEST_TIMEOUT_S) and read what it left. A guest that
    never reached its script (QEMU gone at once, nothing on the console: seen once with two
    guests starting together) is booted once more, alone."""
    timed_out = False
    try:
        console, _ = proc.communicate(timeout=max(1.0, GUEST_TIMEOUT_S - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        timed_out = True
        console = stop(proc)
        console += f"\n[harness: guest killed after {GUEST_TIMEOUT_S:.0f} s]"
    if retry and not (rwdir / "guest.log").exists() and not console.strip():
        return finish(kernel, *start(kernel, Path((rwdir / "checkout").read_text())), retry=False)
    seconds = time.monotonic() - started
    (rwdir / "console.log").write_text(console or "")
    if retry and not (rwdir / "rc").exists() and not timed_out and not PANIC.search(console or ""):
        # QEMU ended mid-run with no kernel panic, oops or BUG on the guest's console (seen
        # once in CI under TCG, not reproduced): boot once more, alone, and say so. A
        # panic, a hang (the timeout) or a second death fails.
        guest_log = rwdir / "guest.log"
        tail = "\n".join((guest_log.read_text(errors="replace") if guest_log.exists() else "").splitlines()[-5:])
        again = finish(kernel, *start(kernel, Path((rwdir / "checkout").read_text())), retry=False)
        again.earlier_death = f"died after {seconds:.0f} s, console without a panic; its log ended:\n{tail}"
        return again
    rc_file, junit_file, cov_file = rwdir / "rc", rwdir / "junit.xml", rwdir / "coverage.json"
    log = (rwdir / "guest.log").read_text(errors="replace") if (rwdir / "guest.log").exists() else console
    coverage: dict[str, object] = {}
    if cov_file.exists() and cov_file.stat().st_size:
        try:
            coverage = json.loads(cov_file.read_text())
        except json.JSONDecodeError:
            coverage = {"error": cov_file.read_text()[-2000:]}
    return GuestRun(
        kernel=kernel.name,
        release=(rwdir / "release").read_text().strip() if (rwdir / "release").exists() else "?",
        rwdir=rwdir,
        seconds=seconds,
        returncode=int(rc_file.read_text()) if rc_file.exists() and rc_file.read_text().strip() else None,
        log=log,
        junit=ElementTree.parse(junit_file).getroot() if junit_file.exists() else None,
        coverage=coverage,
    )


def run_all(kernels: tuple[Kernel, ...] = KERNELS, concurrent: bool = True) -> list[GuestRun]:
    """Run every guest, all at once when concurrent (each has its own results directory and
    only reads the shared checkout)."""
    checkout = prepare()
    if not concurrent:
        return [finish(k, *start(k, checkout)) for k in kernels]
    started = start_all(kernels, checkout)
    return [finish(k, *started[k.name]) for k in kernels]


def start_all(
    kernels: tuple[Kernel, ...], checkout: Path, nice: int = 0
) -> dict[str, tuple[subprocess.Popen[str], Path, float]]:
    """Boot every guest at once; if one cannot start, the others are killed (no guest
    outlives a harness that failed)."""
    started: dict[str, tuple[subprocess.Popen[str], Path, float]] = {}
    try:
        for k in kernels:
            started[k.name] = start(k, checkout, nice)
    except BaseException:
        for proc, _, _ in started.values():
            stop(proc)
        raise
    return started


def selected(names: str | None = None) -> tuple[Kernel, ...]:
    """KERNELS, or those named in a comma list (``$NETTRAIL_MATRIX_KERNELS``, e.g. "6.1";
    OPTIONAL_KERNELS only so)."""
    names = names if names is not None else os.environ.get("NETTRAIL_MATRIX_KERNELS", "")
    wanted = {n.strip() for n in names.split(",") if n.strip()}
    known = KERNELS + OPTIONAL_KERNELS
    unknown = wanted - {k.name for k in known}
    if unknown:
        raise HarnessError(f"unknown kernel {', '.join(sorted(unknown))}: one of {', '.join(k.name for k in known)}")
    return tuple(k for k in known if k.name in wanted) if wanted else KERNELS


def asked_optional() -> tuple[Kernel, ...]:
    """The OPTIONAL_KERNELS named in $NETTRAIL_MATRIX_KERNELS (an unknown name: none, selected() says so)."""
    try:
        return tuple(k for k in selected() if k in OPTIONAL_KERNELS)
    except HarnessError:
        return ()


def summary(run: GuestRun) -> str:
    counts = run.counts()
    lines = [f"{run.kernel} ({run.release}): {run.seconds:.0f} s, pytest rc={run.returncode}, {counts}"]
    if run.coverage:
        lines.append(f"  object {run.coverage.get('object')}, load {run.coverage.get('load_s')} s")
        lines.append(f"  absent {run.coverage.get('absent')} failed {run.coverage.get('failed')}")
    for provider, what, why in run.coverage.get("degraded", []):  # type: ignore[attr-defined]
        lines.append(f"  degraded {provider} {what}: {why}")
    if run.earlier_death:
        lines.append(f"  booted twice: the first boot {run.earlier_death}")
    lines.extend(f"  FAILED {f.splitlines()[0] if f else f}" for f in run.failures())
    return "\n".join(lines)


def skip_reason() -> str | None:
    """Why this machine runs no guest (missing tools, or the person running asked so), or None."""
    why = missing_tools()
    if why is None and os.environ.get("NETTRAIL_KERNEL_MATRIX") == "0":
        why = "NETTRAIL_KERNEL_MATRIX=0: the Debian 6.1, 6.12 and 5.10 guests are not booted"
    return why


# One pytest session's guests (tests/test_kernel_matrix.py), run one after another by one
# thread: each guest is a single-threaded QEMU, so one guest beside the host's own pytest
# keeps both of this 2-core machine's CPUs busy without starving either (all guests at
# once left the host tests and the guests' collectors a fraction of a CPU each).
_session_lock = threading.Condition()
_session_runs: dict[str, GuestRun | HarnessError] = {}
_session_current: list[subprocess.Popen[str]] = []
_session_thread: list[threading.Thread] = []
_session_stopping = threading.Event()


def _run_session_guests(kernels: tuple[Kernel, ...]) -> None:
    try:
        checkout = prepare()
    except HarnessError as e:
        with _session_lock:
            _session_runs.update({k.name: e for k in kernels})
            _session_lock.notify_all()
        return
    for kernel in kernels:
        outcome: GuestRun | HarnessError
        if _session_stopping.is_set():
            outcome = HarnessError("the session stopped before this guest booted")
        else:
            try:
                started = start(kernel, checkout, GUEST_NICE)
                _session_current[:] = [started[0]]
                outcome = finish(kernel, *started)
            except HarnessError as e:
                outcome = e
            finally:
                _session_current.clear()
        with _session_lock:
            _session_runs[kernel.name] = outcome
            _session_lock.notify_all()


def session_guests() -> None:
    """Start the session's guests (every selected kernel, one after another) once."""
    if not _session_thread:
        thread = threading.Thread(target=_run_session_guests, args=(selected(),), name="kernel-matrix", daemon=True)
        _session_thread.append(thread)
        thread.start()


def session_run(name: str) -> GuestRun:
    """What the guest of this kernel left (waits for it)."""
    session_guests()
    with _session_lock:
        _session_lock.wait_for(lambda: name in _session_runs)
        outcome = _session_runs[name]
    if isinstance(outcome, HarnessError):
        raise outcome
    return outcome


# Registered as a pytest plugin by tests/test_kernel_matrix.py (its pytest_plugins), so only
# in a session that collects it. The guests take 10-30 minutes: they boot as soon as the
# session knows it will run a matrix test, overlap the rest of the suite, and the matrix
# tests go last, so the session waits only for what the guests have not finished by then.
def _matrix_items(items: list[Any]) -> list[Any]:
    return [item for item in items if Path(str(item.path)).name == "test_kernel_matrix.py"]


def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
    matrix = _matrix_items(items)
    if matrix:
        items[:] = [item for item in items if item not in matrix] + matrix


def pytest_collection_finish(session: Any) -> None:
    listing = os.environ.get("NETTRAIL_MATRIX_LIST")
    if listing:  # guest_test_files(): each test's node id and markers
        lines = [f"{i.nodeid}\t{','.join(sorted({m.name for m in i.iter_markers()}))}" for i in session.items]
        Path(listing).write_text("".join(line + "\n" for line in lines))
    if session.config.option.collectonly or not _matrix_items(session.items) or skip_reason() is not None:
        return
    session_guests()  # a harness error is kept and raised by the first matrix test


def pytest_runtest_logreport(report: Any) -> None:
    """Inside a guest: each test's outcome as it ends (progress.tsv; the junit XML is written
    only at the end, which a guest killed at its timeout never reaches)."""
    out = os.environ.get("NETTRAIL_MATRIX_OUT")
    if out and (report.when == "call" or report.outcome != "passed"):
        with open(Path(out) / "progress.tsv", "a") as f:
            f.write(f"{report.nodeid}\t{report.when}\t{report.outcome}\t{report.duration:.1f}\n")
            if report.failed:
                f.write("".join(f"  {line}\n" for line in report.longreprtext.splitlines()[-40:]))


def pytest_sessionfinish(session: Any) -> None:
    """No guest outlives its session (a run stopped early, -x, never waited for it)."""
    _session_stopping.set()
    for proc in list(_session_current):
        stop(proc)


def main(argv: list[str]) -> int:
    """scripts/kernel-matrix [KERNEL,...] [--serial]: run the guests, print a summary, exit 1 on failure."""
    serial = "--serial" in argv
    names = next((a for a in argv if not a.startswith("-")), None)
    try:
        runs = run_all(selected(names), concurrent=not serial)
    except HarnessError as e:
        print(f"kernel-matrix: {e}", file=sys.stderr)
        return 2
    ok = True
    for run in runs:
        print(summary(run))
        print(f"  results: {run.rwdir}")
        ok = ok and run.returncode == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))

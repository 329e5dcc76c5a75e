"""Kernel tests: every program is detached and unloaded after an exception, SIGINT or SIGTERM.

Compared by program id: other engineers' BPF tests may load programs at the same time.
"""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collector.bpf import libbpf, loader, settle
from collector.bpf.loader import PROVIDERS, KernelSession, Options, program_names
from tests.collect_process import Collector
from tests.kernel_support import bpftool_prog_ids, kernel, pinned, programs_left

pytestmark = kernel


def test_an_exception_inside_the_session_detaches_every_program() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with KernelSession(Options(providers=PROVIDERS)) as session:
            ids = set(session.program_ids().values())
            assert len(ids) == len(program_names(Options(providers=PROVIDERS)))
            assert ids <= bpftool_prog_ids()
            raise RuntimeError("boom")
    assert not programs_left(ids)


@pytest.mark.parametrize("softirq_hooks", [False, True])
def test_only_the_chosen_providers_programs_are_loaded(softirq_hooks: bool) -> None:
    """The softirq hooks only where in_task() cannot read the preempt count (this x86
    kernel can, through the runqueue), or when asked for."""
    opts = Options(providers=("siftr",), softirq_hooks=softirq_hooks)
    with KernelSession(opts) as session:
        names = set(session.program_ids())
        ctx_degraded = [d for d in session.degraded if d[1] == "ctx"]
    # the softirq words cannot see a hard interrupt: said, where they are used
    assert ctx_degraded == ([("siftr", "ctx", loader.CTX_FROM_HOOKS_LOSES)] if softirq_hooks else [])
    assert loader.context_source(opts) == ("softirq hooks" if softirq_hooks else "runqueue")
    assert names == {
        "inet_sock_set_state",
        "sock_send_length",
        "sock_recv_length",
        "tcp_destroy_sock",
        "tcp_probe",
        "net_dev_queue",
    } | ({"softirq_entry", "softirq_exit"} if softirq_hooks else set())


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_nettrail_collect_detaches_and_reports_totals_on_a_signal(signum: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with Collector(
        "--providers", ",".join(PROVIDERS), "--filter", "port=1", "--out", str(tmp_path / "r.jsonl")
    ) as collector:
        ids = set(collector.wait_attached().values())
        assert len(ids) == len(program_names(Options(providers=PROVIDERS))) and ids <= bpftool_prog_ids()
        status, _, err = collector.stop(signum)
        assert status == 0, err
        assert "nettrail collect: events received 0, lost 0" in err
        assert not programs_left(ids)


SLOW_PROGRAM = Path(__file__).with_name("slow_program.bpf.c")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs: one runs the program, one detaches it")
def test_settling_after_a_detach_waits_for_the_runs_begun_before_it(tmp_path: Path) -> None:
    """A program that runs for milliseconds (tests/slow_program.bpf.c) on every system call
    of a process spinning on one CPU, detached from another while a run is under way: the
    run ends after the detach returns, and settle (KernelSession.detach's last step, before
    the final drain) returns only after it: every run begun has ended, none comes later."""
    lib = libbpf.get()
    obj_path = tmp_path / "slow.bpf.o"
    include = f"-I/usr/include/{platform.machine()}-linux-gnu"
    subprocess.run(["clang", "-g", "-O2", "-target", "bpf", include, "-c", str(SLOW_PROGRAM), "-o", str(obj_path)], check=True)  # fmt: skip
    obj = lib.bpf_object__open_file(str(obj_path).encode(), None)
    assert obj and lib.bpf_object__load(obj) == 0
    cpus = sorted(os.sched_getaffinity(0))
    spinner = subprocess.Popen(
        [sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpus[1]}}})\nwhile True: os.getppid()"]
    )
    try:
        state = lib.bpf_map__fd(lib.bpf_object__find_map_by_name(obj, b"state"))

        def runs() -> tuple[int, int]:
            values = [ctypes.c_uint64() for _ in range(2)]
            for key, value in zip((1, 2), values, strict=True):
                assert lib.bpf_map_lookup_elem(state, ctypes.byref(ctypes.c_uint32(key)), ctypes.byref(value)) == 0
            return values[0].value, values[1].value

        tid = ctypes.c_uint64(spinner.pid)
        assert lib.bpf_map_update_elem(state, ctypes.byref(ctypes.c_uint32(0)), ctypes.byref(tid), 0) == 0
        link = lib.bpf_program__attach(lib.bpf_object__find_program_by_name(obj, b"slow"))
        assert link
        with pinned(cpus[0]):
            end = time.monotonic() + 20
            under_way = False
            while not under_way and time.monotonic() < end:  # a run of about 8 ms is under way
                begun, ended = runs()
                under_way = begun >= 3 and begun == ended + 1
            lib.bpf_link__destroy(link)
            settle.synchronize_rcu()
            begun, ended = runs()
        time.sleep(0.1)
        assert under_way
        assert ended == begun  # the run under way at the detach had ended
        assert runs() == (begun, begun)  # and none began after it
    finally:
        spinner.kill()
        spinner.wait()
        lib.bpf_object__close(obj)

"""Kernel tests: every program is detached and unloaded after an exception, SIGINT or SIGTERM.

Compared by program id: other engineers' BPF tests may load programs at the same time.
"""

from __future__ import annotations

import signal

import pytest

from collector.bpf import loader
from collector.bpf.loader import PROVIDERS, KernelSession, Options, program_names
from tests.collect_process import Collector
from tests.kernel_support import bpftool_prog_ids, kernel, programs_left

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

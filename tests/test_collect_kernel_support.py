"""Every provider loads on this kernel, each tracepoint with the program variant of its
prototype, and what the kernel cannot give is named (collector/bpf/variants.py).

Marked `matrix`: inside Debian 12's 6.1 and 6.12 guests (tests/kernel_matrix.py) it also
writes the coverage docs/collector.md's support table is made from.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from collector.bpf import btf, loader, variants
from nettrail.commands.collect import status_record
from tests import kernel_expect
from tests.kernel_matrix_probe import describe
from tests.kernel_support import kernel
from translators.kernel import KernelEnv

pytestmark = kernel


@pytest.mark.matrix
def test_every_provider_loads_with_the_variant_of_this_kernels_prototypes_and_names_its_losses() -> None:
    t0 = time.monotonic()
    with loader.KernelSession(loader.Options()) as s:
        coverage = describe(s, time.monotonic() - t0)
        status = status_record(
            s, KernelEnv(host_id="test-host", boot_id="test-boot", wall_offset=0.0), stack_counters=True
        )
    out = os.environ.get("NETTRAIL_MATRIX_OUT")
    if out:
        Path(out, "coverage.json").write_text(json.dumps(coverage, indent=1))
    assert s.failed == {}
    # only optional tracepoints may be missing on the kernels nettrail runs on (the
    # attribution hooks before 6.3, tcp_cong_state_set on 5.10), each with its losses named
    assert set(s.absent) <= set(variants.ABSENT_LOSES)
    assert coverage["attached"] == sorted(tp for tp in s.program_names() if tp not in s.absent)
    # Debian's kernels and this host's: task context from the preempt count, without the
    # softirq hooks (x86: through the runqueue, per-CPU offsets from BTF; core_fixes.bpf.h)
    assert loader.context_source(s.opts) == (
        "thread_info" if btf.has_member("thread_info", "preempt_count") else "runqueue"
    )
    assert not {"softirq_entry", "softirq_exit"} & set(s.links)
    assert not [d for d in s.degraded if d[1] == "ctx"]  # 5.10 too: its offsets from kallsyms
    # each variant takes exactly the arguments the kernel passes: nothing it offers is left unread
    # (tcp_recvmsg: a kernel function, whose fexit program declares its parameters exactly,
    # loaded only before 6.3)
    tcp_calls = s.tcp_call_source()
    for tp, options in variants.VARIANTS.items():
        if tp in variants.TCP_FUNCTION_ARGS and tcp_calls != "kernel functions":
            assert tp not in s.choice.programs, tp
            continue
        [chosen] = [v for v in options if v.program == s.choice.programs[tp]]
        args_of = btf.func_args if tp in variants.TCP_FUNCTION_ARGS else btf.tracepoint_args
        assert chosen.args == args_of(tp), tp
        for provider, what, why in chosen.loses:
            assert (provider, what, why) in s.degraded
    # an absent tracepoint's losses are named, but for the udp calls' when another source
    # gives them before 6.3 (the UDP functions here, the system calls where those are
    # refused), which names what it misses instead; so for TCP's calls from tcp_sendmsg/tcp_recvmsg
    # before 6.3 (attribution, tcpdebug's SEND/RCVD)
    source = s.udp_call_source()
    for other, names in loader.SOURCE_PROGRAMS.items():
        assert (set(names) <= set(coverage["attached"])) == (other == source), other
    for tp in s.absent:
        tcp_filled = variants.TCP_FUNCTION_FILLS if tcp_calls == "kernel functions" else set()
        filled = {
            d
            for d in variants.ABSENT_LOSES[tp]
            if (source != "socket tracepoints" and d[1].startswith("udp_call.")) or d[:2] in tcp_filled
        }
        assert set(variants.ABSENT_LOSES[tp]) - filled <= set(s.degraded) and not filled & set(s.degraded)
    if tcp_calls == "kernel functions":
        assert set(variants.TCP_FUNCTION_LOSES) <= set(s.degraded)
    if source != "socket tracepoints":
        losses = variants.FUNCTION_SOURCE_LOSES if source == "kernel functions" else variants.SYSCALL_SOURCE_LOSES
        assert set(losses) <= set(s.degraded)
    # what `nettrail collect` sends first and prints on stderr
    assert status.degraded == variants.by_provider(s.degraded)  # type: ignore[attr-defined]
    # before 6.2 the compat object, before 5.12 (no atomic fetch) its legacy build
    assert s.path.name == kernel_expect.OBJECT

"""Where in_task() finds the preempt count on x86 (collector/bpf/btf.py): per-CPU
variables' offsets and struct members read from the kernel's BTF, checked against
bpftool's own dump of the same BTF. That the count read there is the right one is
tested by the ctx of real events (tests/test_collect_tcp_provider.py, in the kernel
matrix too)."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

from collector.bpf import btf

VMLINUX = Path("/sys/kernel/btf/vmlinux")
pytestmark = pytest.mark.skipif(not VMLINUX.exists(), reason="no kernel BTF")


@cache
def raw_dump() -> str:
    return subprocess.run(
        ["bpftool", "btf", "dump", "file", str(VMLINUX), "format", "raw"], capture_output=True, text=True, check=True
    ).stdout


def bpftool_percpu_offset(var: str) -> int:
    [offset] = re.findall(rf"offset=(\d+) size=\d+ \(VAR '{re.escape(var)}'\)", raw_dump())
    return int(offset)


def bpftool_member_offset(struct: str, member: str) -> int:
    body = raw_dump().split(f"STRUCT '{struct}' size=", 1)[1].split("\n[", 1)[0]
    [bits] = re.findall(rf"^\s+'{re.escape(member)}' type_id=\d+ bits_offset=(\d+)", body, re.M)
    return int(bits) // 8


def test_per_cpu_offsets_are_the_per_cpu_sections_own() -> None:
    for var in ("runqueues", "softnet_data", "this_cpu_off"):
        assert btf.percpu_offset(var) == bpftool_percpu_offset(var), var
    assert btf.percpu_offset("no_such_per_cpu_variable") is None


def test_member_offsets_match_bpftool_and_reach_into_anonymous_members() -> None:
    assert btf.member_offset("cfs_rq", "rq") == bpftool_member_offset("cfs_rq", "rq")
    assert btf.member_offset("sched_entity", "cfs_rq") == bpftool_member_offset("sched_entity", "cfs_rq")
    # sk_buff's `dev` sits in an anonymous struct inside an anonymous union at its start
    assert "'dev'" not in raw_dump().split("STRUCT 'sk_buff' size=", 1)[1].split("\n[", 1)[0]
    assert btf.member_offset("sk_buff", "dev") == 16
    assert btf.member_offset("cfs_rq", "no_such_member") is None


def test_the_preempt_count_is_found_from_the_runqueue_where_the_kernel_has_the_links() -> None:
    count = (
        btf.percpu_offset("__preempt_count")
        if btf.percpu_offset("__preempt_count") is not None
        else btf.percpu_offset("pcpu_hot") + btf.member_offset("pcpu_hot", "preempt_count")  # type: ignore[operator]
    )
    assert btf.preempt_count_from_runqueue() == count - bpftool_percpu_offset("runqueues")

"""Per-CPU variables' offsets from kallsyms (collector/bpf/kallsyms.py), where a kernel's BTF
lists none (Debian 11's 5.10): x86-64 links the per-CPU section at 0, so CONFIG_KALLSYMS_ALL
lists each per-CPU symbol at its offset. That the preempt count found so is the right one is
tested by the ctx of real events in the 5.10 guest (tests/test_collect_tcp_provider.py)."""

from __future__ import annotations

from pathlib import Path

from collector.bpf import kallsyms

# the lines of 5.10's /proc/kallsyms that matter, and others around them
LINES = """\
0000000000000000 A fixed_percpu_data
000000000001b0c4 A __preempt_count
000000000002c6c0 A runqueues
ffffffff81000000 T _stext
0000000000000000 A hidden_by_kptr_restrict
ffffffffc0a01000 t runqueues_in_a_module\t[some_module]
"""


def test_per_cpu_offsets_are_read_from_kallsyms_and_unlisted_or_zero_ones_left_out(tmp_path: Path) -> None:
    path = tmp_path / "kallsyms"
    path.write_text(LINES)
    wanted = ("runqueues", "__preempt_count", "hidden_by_kptr_restrict", "not_listed")
    assert kallsyms.percpu_offsets(wanted, path) == {"runqueues": 0x2C6C0, "__preempt_count": 0x1B0C4}
    assert kallsyms.percpu_offsets(wanted, tmp_path / "missing") == {}

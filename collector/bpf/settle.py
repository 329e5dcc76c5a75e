"""Waiting for an RCU grace period from user space: until no run of a detached program,
and no softirq, that had begun is left.

Detaching a program (destroying its link) stops new runs only: a run another CPU began
just before can still write its event afterwards, which a final read of the ring made
at once would miss, neither received nor counted lost. A tracepoint's BPF programs run
inside rcu_read_lock() (bpf_trace_run), and a softirq being served has bottom halves off,
also an RCU read-side section: so one grace period covers both (the loader's attach of
the softirq hooks needs the second). The kernel's own way for user space to wait for one
is an update of a map-in-map: the bpf() syscall returns only after synchronize_rcu()
(maybe_wait_bpf_programs, kernel/bpf/syscall.c), so that user space knows no program
still runs with the old value; on every kernel nettrail supports, PREEMPT_RT included,
and on every CPU, whichever the collector may run on.
"""

from __future__ import annotations

import ctypes
import os

from collector.bpf import libbpf

BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_ARRAY_OF_MAPS = 2, 12

_maps: tuple[int, int] | None = None  # (outer, inner): made once per process, kept open


def _barrier() -> tuple[int, int]:
    global _maps
    if _maps is None:
        lib = libbpf.get()
        inner = lib.bpf_map_create(BPF_MAP_TYPE_ARRAY, b"nt_settle_in", 4, 4, 1, None)
        if inner < 0:
            raise OSError(-inner, f"creating the settle map: {os.strerror(-inner)}")
        opts = libbpf.BpfMapCreateOpts(sz=ctypes.sizeof(libbpf.BpfMapCreateOpts), inner_map_fd=inner)
        outer = lib.bpf_map_create(BPF_MAP_TYPE_ARRAY_OF_MAPS, b"nt_settle", 4, 4, 1, ctypes.byref(opts))
        if outer < 0:
            os.close(inner)
            raise OSError(-outer, f"creating the settle map: {os.strerror(-outer)}")
        _maps = (outer, inner)
    return _maps


def ready() -> None:
    """Make the maps now (the loader, at load): a failure is said at start-up, never at a
    final drain, where it would cost the ring's events."""
    _barrier()


def synchronize_rcu() -> None:
    """Return once every BPF program run and every softirq that had begun has ended."""
    outer, inner = _barrier()
    key, value = ctypes.c_uint32(0), ctypes.c_uint32(inner)
    ret = libbpf.get().bpf_map_update_elem(outer, ctypes.byref(key), ctypes.byref(value), 0)
    if ret < 0:
        raise OSError(-ret, f"waiting for running programs: {os.strerror(-ret)}")

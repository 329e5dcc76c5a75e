"""Acquire loads, release stores and an acquire fence on shared memory, from Python.

The BPF ring buffer is shared with the kernel through mmap, and libbpf's ringbuf.c
reads the producer position and each record header with smp_load_acquire and writes
the consumer position with smp_store_release. Python has no atomics, so these are
libatomic's own functions (GCC's runtime, package libatomic1, installed with gcc),
called through ctypes: __atomic_load_8, __atomic_store_8 and atomic_thread_fence
with the C11 memory orders. They compile to what the kernel's helpers do on each
CPU: LDAR / STLR / DMB ISHLD on arm64, plain MOVs on x86-64.

Why not plain numpy loads and stores everywhere: they are single aligned 8-byte
accesses, but only x86's total store order keeps them in program order (a load is
not reordered with an older load, a store not with an older load or store). arm64,
POWER and RISC-V may satisfy the record copy's loads before the producer position's
load, or make the consumer position visible before the copy's loads are done, so
the kernel could overwrite records being copied. Without libatomic, x86 falls back
to plain accesses (correct there, as argued above); other CPUs refuse to start.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

# C11 / GCC memory orders (<stdatomic.h> memory_order, __ATOMIC_* of GCC's builtins)
ACQUIRE = 2
RELEASE = 3
TSO_MACHINES = frozenset({"x86_64", "i686", "i586", "i386"})


class OrderingError(RuntimeError):
    """No way to order accesses to the ring on this machine."""


@dataclass(frozen=True)
class Atomics:
    """libatomic's functions (looked up by name: Python would mangle `lib.__atomic_*`
    written inside a class)."""

    load: Any  # __atomic_load_8(const void *, int order) -> u64
    store: Any  # __atomic_store_8(void *, u64, int order)
    fence: Any  # atomic_thread_fence(int order)


def _open_libatomic() -> Atomics | None:
    for name in ("libatomic.so.1", ctypes.util.find_library("atomic")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        load = getattr(lib, "__atomic_load_8")
        load.restype = ctypes.c_uint64
        load.argtypes = [ctypes.c_void_p, ctypes.c_int]
        store = getattr(lib, "__atomic_store_8")
        store.restype = None
        store.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int]
        fence = lib.atomic_thread_fence
        fence.restype = None
        fence.argtypes = [ctypes.c_int]
        return Atomics(load, store, fence)
    return None


class Ordered:
    """Ordered access to one u64 position in shared memory (a numpy view of it)."""

    def __init__(self, word: np.ndarray[Any, np.dtype[np.uint64]], atomics: Atomics | None) -> None:
        self.word = word
        self.addr = word.ctypes.data
        self.atomics = atomics

    def load_acquire(self) -> int:
        if self.atomics is None:
            return int(self.word[0])
        return int(self.atomics.load(self.addr, ACQUIRE))

    def store_release(self, value: int) -> None:
        if self.atomics is None:
            self.word[0] = value
        else:
            self.atomics.store(self.addr, value, RELEASE)


class Fences:
    """The library to order with, chosen once per process: see the module docstring."""

    def __init__(self) -> None:
        self.atomics = _open_libatomic()
        machine = os.uname().machine
        if self.atomics is None and machine not in TSO_MACHINES:
            raise OrderingError(
                f"libatomic.so.1 not found: apt-get install libatomic1 (needed to read the ring on {machine})"
            )

    def word(self, view: np.ndarray[Any, np.dtype[np.uint64]]) -> Ordered:
        return Ordered(view, self.atomics)

    def acquire(self) -> None:
        """Loads before this one (record headers) happen before any load after it (their data)."""
        if self.atomics is not None:
            self.atomics.fence(ACQUIRE)

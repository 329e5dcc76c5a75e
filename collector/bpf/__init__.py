"""Kernel side of the collector: build, load and read kmod/nettrail.bpf.o through libbpf (ctypes).

Modules: libbpf (binding), build (make -C kmod when stale), btf (enum names),
layout (nettrail.h as numpy dtypes), ringbuf (mmap batch reader), ordering (its
acquire/release accesses), loader
(KernelSession: open, configure, load, attach, clean up), source (events -> records).
"""

from __future__ import annotations

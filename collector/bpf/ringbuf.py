"""Read a BPF ring buffer through mmap, a whole batch of fixed-size records at a time.

Every nettrail event is one `struct nt_event` (kmod/nettrail.h), so records sit in
the ring at a fixed stride and a batch is one numpy view, copied out before the
consumer position moves (the kernel may then overwrite it). Keep in sync with the
kernel's ring-buffer format (include/uapi/linux/bpf.h BPF_RINGBUF_*; 8-byte record
header {u32 len with busy/discard bits, u32 page offset}; data mapped twice so a
record that wraps is contiguous).
"""

from __future__ import annotations

import mmap
import select
import struct

import numpy as np

BUSY_BIT = 1 << 31
DISCARD_BIT = 1 << 30
HDR_SIZE = 8
_U64 = struct.Struct("<Q")


class RingFormatError(RuntimeError):
    """A record of an unexpected size: the object and this reader disagree."""


class RingReader:
    def __init__(self, map_fd: int, size: int, record_size: int) -> None:
        page = mmap.PAGESIZE
        self.mask = size - 1
        self.stride = (record_size + HDR_SIZE + 7) & ~7
        self.record_size = record_size
        self.consumer = mmap.mmap(map_fd, page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        self.producer = mmap.mmap(map_fd, page + 2 * size, mmap.MAP_SHARED, mmap.PROT_READ, offset=page)
        self.data_offset = page
        self.dtype = np.dtype([("len", "<u4"), ("pg_off", "<u4"), ("rec", f"V{self.stride - HDR_SIZE}")])
        self.epoll = select.epoll()
        self.epoll.register(map_fd, select.EPOLLIN)

    def pending(self) -> int:
        """Bytes committed or reserved by producers and not yet consumed."""
        produced: int = _U64.unpack_from(self.producer, 0)[0]
        consumed: int = _U64.unpack_from(self.consumer, 0)[0]
        return produced - consumed

    def read(self, max_records: int = 65536) -> np.ndarray:
        """Copy out up to max_records complete records (as raw bytes, one row each) and consume them."""
        cons = _U64.unpack_from(self.consumer, 0)[0]
        prod = _U64.unpack_from(self.producer, 0)[0]
        n = min((prod - cons) // self.stride, max_records)
        if n <= 0:
            return np.empty(0, dtype=f"V{self.stride - HDR_SIZE}")
        view = np.frombuffer(self.producer, self.dtype, count=n, offset=self.data_offset + (cons & self.mask))
        lens = view["len"]
        busy = np.flatnonzero(lens & BUSY_BIT)
        if busy.size:
            n = int(busy[0])  # a producer is still writing this one: stop before it
            view, lens = view[:n], lens[:n]
        sizes = lens & ~np.uint32(BUSY_BIT | DISCARD_BIT)
        if n and np.any(sizes != self.record_size):
            bad = int(sizes[np.flatnonzero(sizes != self.record_size)[0]])
            raise RingFormatError(f"ring record of {bad} bytes, struct nt_event is {self.record_size}: rebuild kmod")
        discarded = (lens & DISCARD_BIT) != 0
        # boolean indexing already copies; without discards (the usual case) one plain copy
        keep: np.ndarray = view["rec"][~discarded] if discarded.any() else view["rec"].copy()
        _U64.pack_into(self.consumer, 0, cons + n * self.stride)
        return keep

    def wait(self, timeout: float) -> bool:
        """Block until the kernel signals new data (or timeout seconds); True if woken."""
        return bool(self.epoll.poll(timeout))

    def close(self) -> None:
        self.epoll.close()
        self.consumer.close()
        self.producer.close()

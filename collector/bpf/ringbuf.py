"""Read a BPF ring buffer through mmap, a whole batch of fixed-size records at a time.

Every nettrail event is one `struct nt_event` (kmod/nettrail.h), so records sit in
the ring at a fixed stride and a batch is one numpy view, copied out before the
consumer position moves (the kernel may then overwrite it). Keep in sync with the
kernel's ring-buffer format (include/uapi/linux/bpf.h BPF_RINGBUF_*; 8-byte record
header {u32 len with busy/discard bits, u32 page offset}; data mapped twice so a
record that wraps is contiguous).

Memory ordering is libbpf's ringbuf.c's (ringbuf_process_ring), against the kernel's
kernel/bpf/ringbuf.c: the producer position is loaded with acquire (pairs with the
smp_store_release in __bpf_ringbuf_reserve, so the record headers it covers are
visible); the headers are read, then an acquire fence (pairs with the xchg that
clears a header's busy bit in bpf_ringbuf_commit, so a record seen committed is seen
whole); the records are copied; the consumer position is stored with release (pairs
with the smp_load_acquire of consumer_pos in __bpf_ringbuf_reserve, so the kernel
reuses the space only after the copy). collector/bpf/ordering.py says how.
"""

from __future__ import annotations

import mmap
import select

import numpy as np

from collector.bpf.ordering import Fences

BUSY_BIT = 1 << 31
DISCARD_BIT = 1 << 30
HDR_SIZE = 8


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
        # The positions are read and written as whole aligned u64s, one load or store each
        # (struct.pack_into wrote a u64 a byte at a time: the kernel could read a torn
        # consumer position far behind the real one, find the ring "full" and fail a
        # reservation while the ring was nearly empty), with acquire and release order.
        self.fences = Fences()
        self.consumer_pos = np.frombuffer(self.consumer, np.uint64, count=1)
        self.producer_pos = np.frombuffer(self.producer, np.uint64, count=1)
        self.cons = self.fences.word(self.consumer_pos)
        self.prod = self.fences.word(self.producer_pos)
        self.data_offset = page
        self.dtype = np.dtype([("len", "<u4"), ("pg_off", "<u4"), ("rec", f"V{self.stride - HDR_SIZE}")])
        self.epoll = select.epoll()
        self.epoll.register(map_fd, select.EPOLLIN)

    def pending(self) -> int:
        """Bytes committed or reserved by producers and not yet consumed."""
        return self.prod.load_acquire() - self.cons.load_acquire()

    def read(self, max_records: int = 65536) -> np.ndarray:
        """Copy out up to max_records complete records (as raw bytes, one row each) and consume them."""
        cons = self.cons.load_acquire()
        prod = self.prod.load_acquire()
        n = min((prod - cons) // self.stride, max_records)
        if n <= 0:
            return np.empty(0, dtype=f"V{self.stride - HDR_SIZE}")
        view = np.frombuffer(self.producer, self.dtype, count=n, offset=self.data_offset + (cons & self.mask))
        lens = view["len"].copy()  # each header read once, before the fence
        self.fences.acquire()
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
        self.cons.store_release(cons + n * self.stride)
        return keep

    def wait(self, timeout: float) -> bool:
        """Block until the kernel signals new data (or timeout seconds); True if woken."""
        return bool(self.epoll.poll(timeout))

    def close(self) -> None:
        self.epoll.close()
        del self.cons, self.prod, self.consumer_pos, self.producer_pos  # views pin the maps: release them first
        self.consumer.close()
        self.producer.close()

"""Live capture: scapy's AF_PACKET listen socket -> the same packet batches as capture files.

Frames are read raw (no scapy dissection per packet) with their kernel receive
timestamps (SO_TIMESTAMPNS), grouped into :class:`translators.packet_batch.Batch` objects
every ``flush_s`` seconds or ``max_batch`` frames, and optionally written to a classic
pcap file (nanosecond magic) as they arrive. Like libpcap, outgoing copies on a loopback
interface are dropped, so each loopback packet is seen once.

Keep in sync with: translators/packet_batch.py (Batch), nettrail/commands/capture.py.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import struct
import time
from collections.abc import Iterator
from typing import BinaryIO

import numpy as np

from translators.packet_batch import PAD, Batch

SO_TIMESTAMPNS = 35
SO_RCVBUFFORCE = 33
SOL_PACKET, PACKET_STATISTICS = 263, 6
RCVBUF = 32 << 20
PACKET_OUTGOING = 4
ARPHRD_LINKTYPE = {
    1: 1,
    772: 1,
    65534: 101,
    768: 101,
    776: 101,
    778: 101,
}  # ether, loopback, none/ipip/sit/gre -> raw IP
SNAPLEN = 262144
MAX_DISCARDED = 1 << 20  # a bound on the frames queued before the filter (32 MiB of buffer)


class CaptureUnavailable(Exception):
    """The interface cannot be captured (missing privileges, unknown interface or link type)."""


class LiveCapture:
    """Read frames from one interface until a deadline or stop()."""

    def __init__(
        self,
        iface: str,
        write: BinaryIO | None = None,
        flush_s: float = 0.5,
        max_batch: int = 4096,
        bpf: str | None = None,
    ) -> None:
        # scapy warns that it cannot guess a dissector for loopback; we never dissect with it
        logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
        from scapy.arch.linux import L2ListenSocket
        from scapy.error import Scapy_Exception

        if not os.path.exists(f"/sys/class/net/{iface}"):
            raise CaptureUnavailable(f"cannot capture on {iface}: no such interface")
        try:
            self._scapy = L2ListenSocket(iface=iface, promisc=False, filter=bpf)
        except Scapy_Exception as exc:  # the filter did not compile
            raise CaptureUnavailable(f"bad filter {bpf!r}: {exc}") from None
        except PermissionError as exc:
            raise CaptureUnavailable(
                f"opening a packet socket on {iface} needs CAP_NET_RAW (run as root): {exc.strerror}"
            ) from None
        except (OSError, ValueError) as exc:
            raise CaptureUnavailable(f"cannot capture on {iface}: {getattr(exc, 'strerror', None) or exc}") from None
        self.sock: socket.socket = self._scapy.ins
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self._grow_buffer()
        self._discard_before_filter()
        hatype = self.sock.getsockname()[3]
        if hatype not in ARPHRD_LINKTYPE:
            self.close()
            raise CaptureUnavailable(f"cannot capture on {iface}: link type ARPHRD {hatype} is not supported")
        self.linktype = ARPHRD_LINKTYPE[hatype]
        self.loopback = hatype == 772
        self.iface = iface
        self.write = write
        self.flush_s = flush_s
        self.max_batch = max_batch
        self.frames = 0
        self.stopped = False
        if write is not None:
            write.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, SNAPLEN, self.linktype))

    def _grow_buffer(self) -> None:
        """A large receive buffer so bursts wait for the reader instead of being dropped."""
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
        except OSError:  # without CAP_NET_ADMIN: as much as net.core.rmem_max allows
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)

    def _discard_before_filter(self) -> None:
        """The socket took every frame of every interface from its creation until scapy had
        bound it and compiled and attached the filter (tens of ms): those frames are not the
        capture's (other interfaces, other ports) and, on a busy host, its small default
        buffer overflowed meanwhile. Read and drop what is queued and reset the drop count,
        as libpcap does, before the capture says it is listening."""
        timeout = self.sock.gettimeout()
        self.sock.setblocking(False)
        try:
            for _ in range(MAX_DISCARDED):
                self.sock.recv(1)
        except BlockingIOError:
            pass
        finally:
            self.sock.settimeout(timeout)
        self.kernel_drops()  # PACKET_STATISTICS resets on read

    def kernel_drops(self) -> int:
        """Packets the kernel dropped for this socket since the last call (PACKET_STATISTICS)."""
        try:
            raw = self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
        except OSError:
            return 0
        return int(struct.unpack("II", raw)[1])

    def stop(self) -> None:
        self.stopped = True

    def close(self) -> None:
        self._scapy.close()

    def _recv(self) -> tuple[bytes, int] | None:
        data, anc, _flags, addr = self.sock.recvmsg(SNAPLEN, 64)
        if self.loopback and addr[2] == PACKET_OUTGOING:
            return None
        ts = time.time_ns()
        for level, kind, value in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= 16:
                sec, nsec = struct.unpack("qq", value[:16])
                ts = sec * 1_000_000_000 + nsec
        return data, ts

    def batches(self, duration: float | None) -> Iterator[Batch]:
        """Yield batches until `duration` seconds have passed (None: until stop())."""
        deadline = None if duration is None else time.monotonic() + duration
        frames: list[bytes] = []
        stamps: list[int] = []
        flush_at = time.monotonic() + self.flush_s
        while not self.stopped:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                break
            wait = min(flush_at, deadline if deadline is not None else flush_at) - now
            ready, _, _ = select.select([self.sock], [], [], max(wait, 0))
            if ready:
                got = self._recv()
                if got is not None:
                    frames.append(got[0])
                    stamps.append(got[1])
            if frames and (len(frames) >= self.max_batch or time.monotonic() >= flush_at):
                yield self._batch(frames, stamps)
                frames, stamps = [], []
            if time.monotonic() >= flush_at:
                flush_at = time.monotonic() + self.flush_s
        if frames:
            yield self._batch(frames, stamps)

    def _batch(self, frames: list[bytes], stamps: list[int]) -> Batch:
        if self.write is not None:
            for data, ts in zip(frames, stamps, strict=True):
                sec, ns = divmod(ts, 1_000_000_000)
                self.write.write(struct.pack("<IIII", sec, ns, len(data), len(data)) + data)
            self.write.flush()
        lengths = np.fromiter((len(f) for f in frames), dtype=np.int64, count=len(frames))
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
        count = len(frames)
        batch = Batch(
            buf=b"".join(frames) + bytes(PAD),
            data_off=starts,
            caplen=lengths,
            wirelen=lengths.copy(),
            ts_ns=np.asarray(stamps, dtype=np.int64),
            linktype=np.full(count, self.linktype, dtype=np.int64),
            iface=np.zeros(count, dtype=np.int64),
            file_off=np.full(count, -1, dtype=np.int64),
            first_frame=self.frames + 1,
        )
        self.frames += count
        return batch

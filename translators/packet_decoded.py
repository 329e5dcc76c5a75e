"""One decoded packet batch: numpy header columns per packet, Python lists on demand.

What translators/packet.py's bulk decoder returns; the capture analysis (analysis/flows)
reads it through translators/packet_view.py's PacketView, which translators/packet_rows.py's
decoder of small captures satisfies too. ``portable()`` is the compact copy sent from the
decoding worker process to the analysis process.

Keep in sync with: translators/packet.py (the columns it fills), translators/packet_batch.py
(the batch it keeps), analysis/capture/pcap_worker.py (sends portable copies).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from translators.packet_batch import Batch
from translators.packet_layers import K_TCP, IcmpQuote, TcpOptions

IntArray = npt.NDArray[np.int64]


class Decoded:
    """One decoded batch: numpy columns per packet, Python lists on demand.

    The TCP fast path reads :meth:`tcp_columns` (lists for the TCP packets only); the
    ordered per-packet path (UDP, ICMP, --packets) reads the per-packet list properties.
    """

    LIST_COLUMNS = (
        "kind",
        "ip_ver",
        "sport",
        "dport",
        "seq",
        "ack",
        "flags",
        "window",
        "payload",
        "ip_len",
        "fragment",
    )

    def __init__(
        self, batch: Batch, arrays: dict[str, IntArray], v6: dict[int, tuple[int, int]], options: dict[int, TcpOptions],
        icmp: dict[int, IcmpQuote], reasons: dict[int, str],
    ) -> None:  # fmt: skip
        self.batch = batch
        self.n = len(batch)
        self.cols = arrays
        self.v6 = v6
        self.option_map = options
        self.icmp = icmp
        self.reasons = reasons
        self._lists: dict[str, list[Any]] = {}

    # columns the analysis reads without --packets, with the narrowest dtype that holds them
    PORTABLE = {
        "kind": np.int8, "ip_ver": np.int8, "src": np.int64, "dst": np.int64, "sport": np.int32, "dport": np.int32,
        "seq": np.uint32, "ack": np.uint32, "flags": np.int16, "window": np.int32, "payload": np.int32,
        "ip_len": np.int32, "fragment": np.int8, "proto": np.int16,
    }  # fmt: skip

    def portable(self) -> Decoded:
        """A compact copy for another process: no packet bytes, only what the analysis reads
        when it does not emit per-packet records (about 45 bytes per packet)."""
        b = self.batch
        empty = np.zeros(0, np.int64)
        lean = Batch(
            buf=b"", data_off=empty, caplen=b.caplen.astype(np.int32), wirelen=b.wirelen.astype(np.int32),
            ts_ns=b.ts_ns, linktype=empty, iface=empty, file_off=b.file_off, first_frame=b.first_frame,
        )  # fmt: skip
        cols = {name: self.cols[name].astype(dtype) for name, dtype in self.PORTABLE.items()}
        out = Decoded(lean, cols, self.v6, self.option_map, self.icmp, self.reasons)
        out.n = self.n
        return out

    def _list(self, name: str) -> list[Any]:
        got = self._lists.get(name)
        if got is None:
            got = self._lists[name] = self.cols[name].tolist()
        return got

    @property
    def frame(self) -> list[int]:
        got = self._lists.get("frame")
        if got is None:
            first = self.batch.first_frame
            got = self._lists["frame"] = list(range(first, first + self.n))
        return got

    @property
    def ts_ns(self) -> list[int]:
        got = self._lists.get("ts_ns")
        if got is None:
            got = self._lists["ts_ns"] = self.batch.ts_ns.tolist()
        return got

    @property
    def wire_len(self) -> list[int]:
        got = self._lists.get("wire_len")
        if got is None:
            got = self._lists["wire_len"] = self.batch.wirelen.tolist()
        return got

    def _addr(self, name: str, which: int) -> list[int]:
        got = self._lists.get(name)
        if got is None:
            got = self._lists[name] = self.cols[name].tolist()
            for i, pair in self.v6.items():
                got[i] = pair[which]
        return got

    @property
    def src(self) -> list[int]:
        return self._addr("src", 0)

    @property
    def dst(self) -> list[int]:
        return self._addr("dst", 1)

    @property
    def options(self) -> list[TcpOptions | None]:
        got = self._lists.get("options")
        if got is None:
            got = self._lists["options"] = [None] * self.n
            for i, opts in self.option_map.items():
                got[i] = opts
        return got

    # per-packet lists (translators/packet_view.py)
    kind = property(lambda self: self._list("kind"))
    ip_ver = property(lambda self: self._list("ip_ver"))
    sport = property(lambda self: self._list("sport"))
    dport = property(lambda self: self._list("dport"))
    seq = property(lambda self: self._list("seq"))
    ack = property(lambda self: self._list("ack"))
    flags = property(lambda self: self._list("flags"))
    window = property(lambda self: self._list("window"))
    payload = property(lambda self: self._list("payload"))
    ip_len = property(lambda self: self._list("ip_len"))
    fragment = property(lambda self: self._list("fragment"))

    # single values and batch totals (translators/packet_view.py)
    @property
    def buf(self) -> bytes | bytearray:
        return self.batch.buf

    @property
    def first_frame(self) -> int:
        return self.batch.first_frame

    def value(self, name: str, i: int) -> int:
        return int(self.cols[name][i])

    def ts_at(self, i: int) -> int:
        return int(self.batch.ts_ns[i])

    def frame_end(self, i: int) -> int:
        return int(self.batch.data_off[i] + self.batch.caplen[i])

    def file_offset(self, i: int) -> int:
        return int(self.batch.file_off[i])

    def caplen_total(self) -> int:
        return int(self.batch.caplen.sum())

    def wirelen_total(self) -> int:
        return int(self.batch.wirelen.sum())

    def count_kind(self, kind: int) -> int:
        return int((self.cols["kind"] == kind).sum())

    def count_fragments(self) -> int:
        return int((self.cols["fragment"] > 0).sum())

    def not_kind(self, kind: int) -> list[int]:
        return list(np.flatnonzero(self.cols["kind"] != kind).tolist())

    def tcp_columns(self) -> tuple[list[Any], ...]:
        """Per-TCP-packet lists: frame, ts, ip_ver, src, sport, dst, dport, seq, ack, flags, window, payload, ip_len, options."""
        c = self.cols
        mask = c["kind"] == K_TCP
        idx = np.flatnonzero(mask)
        src = c["src"][idx].tolist()
        dst = c["dst"][idx].tolist()
        opts: list[TcpOptions | None] = [None] * len(idx)
        if self.v6 or self.option_map:
            pos = np.cumsum(mask) - 1
            for i, pair in self.v6.items():
                if mask[i]:
                    src[pos[i]], dst[pos[i]] = pair
            for i, o in self.option_map.items():
                opts[pos[i]] = o
        frames = (idx + self.batch.first_frame).tolist()
        cols = [
            c[name][idx].tolist()
            for name in ("ip_ver", "sport", "dport", "seq", "ack", "flags", "window", "payload", "ip_len")
        ]
        ver, sport, dport, seq, ack, flags, win, payload, ip_len = cols
        ts = self.batch.ts_ns[idx].tolist()
        return frames, ts, ver, src, sport, dst, dport, seq, ack, flags, win, payload, ip_len, opts

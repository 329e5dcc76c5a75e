"""The TCP analysis' in-order fast path in C: most packets of a big capture never reach Python.

Why (issue 35 item 1, docs/analyze.md "Speed"): on a 1M-packet lossy capture 96 % of the
TCP packets are in-order data or advancing ACKs of established conversations, and their
interpreted fast path (tcp_analysis.py's feed_columns) was most of nettrail's CPU. tcp_fast.c
runs exactly that subset over a batch's numpy columns; a packet it is not sure about (and
any packet that would raise a flag) comes back here and runs the full Python state machine.
So the flags stay those of the Python analysis by construction: C only ever does what the
Python fast path would have done, and tests/test_tcp_fast.py compares the two outputs.

State: a conversation is either Python's (the Flow objects) or C's. It becomes C's when a
packet of it could take the fast path (``own``: Flow scalars and unacked segments copied
in, both directions registered with the checks tcp_analysis._side made); it comes back
(``pull``) before Python touches it and at the end of every batch, so between batches every
Flow is up to date (alerts, ICMP matching and summaries read them).

The library is compiled on first use with the system C compiler into the user's cache
(``$NETTRAIL_CACHE``, else ``$XDG_CACHE_HOME/nettrail``, else ``~/.cache/nettrail``), named by
a hash of the source; without a compiler, or with ``NETTRAIL_TCP_FAST=0``, the Python path
runs (the same output, slower).

Keep in sync with: analysis/flows/tcp_fast.c (FIELDS order = flow_t), tcp_analysis.py
(feed_columns and _side), tcp_state.py (Flow).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from translators.packet_layers import K_TCP

if TYPE_CHECKING:
    from analysis.flows.tcp_analysis import TcpAnalyzer
    from analysis.flows.tcp_state import Conv
    from translators.packet_decoded import Decoded
    from translators.packet_view import PacketView

SOURCE = Path(__file__).with_name("tcp_fast.c")
FIELDS = (
    "base_seq", "nextseq", "nextseqtime", "maxseqtobeacked", "lastack", "lastacktime", "window", "win_scale",
    "is_first_ack", "dupacknum", "lastnondupack", "lastsegmentflags", "ordered", "lastacklen", "packets", "bytes",
    "wire_bytes", "data_segments", "rtt_n", "rtt_sum", "rtt_min", "rtt_max",
)  # fmt: skip
CDEF = """
void *nt_new(void);
void nt_free(void *);
int64_t nt_flow_new(void *);
void nt_flow_set(void *, int64_t, const int64_t *);
void nt_flow_get(void *, int64_t, int64_t *);
int64_t nt_segs_len(void *, int64_t);
void nt_segs_get(void *, int64_t, int64_t *);
void nt_segs_set(void *, int64_t, const int64_t *, int64_t);
void nt_side_set(void *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
void nt_side_off(void *, int64_t, int64_t, int64_t, int64_t);
int64_t nt_conv_ts(void *, int64_t);
void nt_own(void *, int64_t, int64_t, int64_t, const int64_t *, const int64_t *, int64_t, int64_t, int64_t, int64_t,
            int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
int64_t nt_pull(void *, int64_t, int64_t, int64_t, int64_t *, int64_t, int64_t, int64_t, int64_t);
void nt_segs_get2(void *, int64_t, int64_t, int64_t *);
int64_t nt_run(void *, int64_t, int64_t, const int64_t *, const int64_t *, const int64_t *, const int64_t *,
               const int64_t *, const int64_t *, const int64_t *, const int64_t *, const int64_t *, const int64_t *,
               const int64_t *, const int64_t *, const int8_t *);
"""
COLUMNS = ("sport", "dport", "seq", "ack", "flags", "window", "payload", "ip_len")
V6_BASE = 1 << 32  # v6 addresses become V6_BASE + a number: C keys on 64-bit addresses

_loaded: tuple[Any, Any] | None | bool = False


def feed(tcp: TcpAnalyzer, d: PacketView) -> None:
    """Analyse a decoded batch's TCP packets: a numpy batch through the C fast path when the
    library is available, anything else (a small capture's Python rows, an analyser keeping
    per-packet results) through TcpAnalyzer.feed_columns. Numpy and cffi load only here."""
    fast = tcp.fast
    if fast is None:
        fast = False
        if not tcp.keep_results and type(d).__name__ == "Decoded":
            fast = FastPath.create(tcp) or False
        tcp.fast = fast
    if fast:
        fast.feed(d)  # type: ignore[arg-type,unused-ignore]  # a Decoded, checked above
    else:
        tcp.feed_columns(d.tcp_columns())


_get_fields = attrgetter(*FIELDS)


def _make_setter() -> Any:
    """f(flow, values): every FIELDS attribute in one unpacking assignment (a loop of setattr
    calls costs twice as much, and it runs for every conversation handed back)."""
    targets = ", ".join(f"f.{name}" for name in FIELDS)
    ns: dict[str, Any] = {}
    exec(
        f"def set_fields(f, v):\n    {targets} = v\n    f.is_first_ack = bool(f.is_first_ack)\n    f.ordered = bool(f.ordered)\n",
        ns,
    )  # noqa: S102
    return ns["set_fields"]


_set_fields = _make_setter()


def cache_dir() -> Path:
    base = os.environ.get("NETTRAIL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "nettrail"
    )
    return Path(base)


def private(st: os.stat_result) -> bool:
    """Whether only this user could have written it: owned by us, not writable by group or
    others. A root `nettrail capture` must not run code another user planted."""
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def load() -> tuple[Any, Any] | None:
    """(ffi, lib), compiling the library on first use; None when it cannot be had."""
    global _loaded
    if _loaded is not False:
        return _loaded  # type: ignore[return-value]
    _loaded = None
    if os.environ.get("NETTRAIL_TCP_FAST", "1") == "0":
        return None
    try:
        from cffi import FFI

        source = SOURCE.read_bytes()
        target = cache_dir() / f"tcp_fast-{hashlib.sha256(source).hexdigest()[:16]}.so"
        if not target.exists():
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
            os.close(fd)
            cc = os.environ.get("CC", "cc")
            subprocess.run(
                [cc, "-O2", "-shared", "-fPIC", "-o", tmp, str(SOURCE)], check=True, capture_output=True, timeout=120
            )
            os.chmod(tmp, 0o700)
            os.replace(tmp, target)  # atomic: a concurrent run sees the whole file or none
        # the file checked is the file loaded: opened without following a link, checked and
        # loaded through its descriptor
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            if not private(os.stat(target.parent)) or not private(os.fstat(fd)):
                return None  # someone else could have written it: the Python path, same output
            ffi = FFI()
            ffi.cdef(CDEF)
            _loaded = (ffi, ffi.dlopen(f"/proc/self/fd/{fd}"))
        finally:
            os.close(fd)
    except (OSError, subprocess.SubprocessError, ImportError):
        _loaded = None
    return _loaded


class FastPath:
    """Runs batches of one TcpAnalyzer through the C fast path."""

    def __init__(self, tcp: TcpAnalyzer, ffi: Any, lib: Any) -> None:
        self.tcp, self.ffi, self.lib = tcp, ffi, lib
        self.h = ffi.gc(lib.nt_new(), lib.nt_free)
        # conv.stream -> C flow indexes (flow1, flow2) and C addresses (flow1, flow2)
        self.slots: dict[int, tuple[int, int, int, int]] = {}
        self.owned: dict[int, Conv] = {}  # conversations whose state is in C now
        self.buf = ffi.new("int64_t[]", 2 * len(FIELDS) + 2)
        self.v6: dict[int, int] = {}

    @classmethod
    def create(cls, tcp: TcpAnalyzer) -> FastPath | None:
        got = load()
        return None if got is None else cls(tcp, *got)

    def addr(self, conv: Conv, a: int) -> int:
        if conv.ip_ver == 4:
            return a
        got = self.v6.get(a)
        if got is None:
            got = self.v6[a] = V6_BASE + len(self.v6)
        return got

    # --- moving a conversation's state ---------------------------------------------

    def own(self, conv: Conv) -> None:
        lib, ffi, tcp = self.lib, self.ffi, self.tcp
        slots = self.slots.get(conv.stream)
        f1, f2 = conv.flow1, conv.flow2
        if slots is None:
            h = self.h
            slots = self.slots[conv.stream] = (
                lib.nt_flow_new(h),
                lib.nt_flow_new(h),
                self.addr(conv, f1.addr),
                self.addr(conv, f2.addr),
            )
        i1, i2, a1, a2 = slots
        buf = self.buf
        buf[0 : 2 * len(FIELDS)] = _get_fields(f1) + _get_fields(f2)
        s1, s2 = f1.segs, f2.segs
        flat = ffi.new("int64_t[]", [v for s in s1 for v in s] + [v for s in s2 for v in s]) if s1 or s2 else ffi.NULL
        side1, side2 = tcp._side(conv, f1.addr, f1.port), tcp._side(conv, f2.addr, f2.port)
        lib.nt_own(
            self.h, conv.stream, i1, i2, buf, flat, len(s1), len(s2), a1, f1.port, a2, f2.port,
            side1[3], side1[4], side2[3], side2[4],
        )  # fmt: skip
        self.owned[conv.stream] = conv

    def pull(self, conv: Conv) -> None:
        lib, ffi = self.lib, self.ffi
        i1, i2, a1, a2 = self.slots[conv.stream]
        f1, f2 = conv.flow1, conv.flow2
        n = len(FIELDS)
        ts = lib.nt_pull(self.h, conv.stream, i1, i2, self.buf, a1, f1.port, a2, f2.port)
        vals = ffi.unpack(self.buf, 2 * n + 2)
        _set_fields(f1, vals[:n])
        _set_fields(f2, vals[n : 2 * n])
        n1, n2 = vals[2 * n], vals[2 * n + 1]
        if n1 or n2:
            flat = ffi.new("int64_t[]", 5 * (n1 + n2))
            lib.nt_segs_get2(self.h, i1, i2, flat)
            segs = ffi.unpack(flat, 5 * (n1 + n2))
            f1.segs = [segs[k : k + 5] for k in range(0, 5 * n1, 5)]
            f2.segs = [segs[k : k + 5] for k in range(5 * n1, 5 * (n1 + n2), 5)]
        else:
            f1.segs = []
            f2.segs = []
        if ts != -1:
            conv.last_ts = ts
        del self.owned[conv.stream]

    def pull_all(self) -> None:
        for conv in list(self.owned.values()):
            self.pull(conv)

    # --- one batch -----------------------------------------------------------------

    def feed(self, d: Decoded) -> None:
        import numpy as np

        c = d.cols
        mask = c["kind"] == K_TCP
        idx = np.flatnonzero(mask)
        n = len(idx)
        if not n:
            return
        i64 = np.int64
        frame = (idx + d.batch.first_frame).astype(i64)
        ts = np.ascontiguousarray(d.batch.ts_ns[idx], dtype=i64)
        ver = c["ip_ver"][idx]
        src = c["src"][idx].astype(i64)
        dst = c["dst"][idx].astype(i64)
        cols = [np.ascontiguousarray(c[name][idx], dtype=i64) for name in COLUMNS]
        sport, dport, seq, ack, flags, win, seglen, ip_len = cols
        slow = np.zeros(n, np.int8)
        pairs: dict[int, tuple[int, int]] = {}
        opts: dict[int, Any] = {}
        if d.v6 or d.option_map:
            pos = np.cumsum(mask) - 1
            for row, o in d.option_map.items():
                if mask[row]:
                    slow[pos[row]] = 1
                    opts[int(pos[row])] = o
            for row, pair in d.v6.items():
                if mask[row]:
                    p = int(pos[row])
                    pairs[p] = pair
                    for arr, a in ((src, pair[0]), (dst, pair[1])):
                        got = self.v6.get(a)
                        if got is None:
                            got = self.v6[a] = V6_BASE + len(self.v6)
                        arr[p] = got
        ffi, lib, h = self.ffi, self.lib, self.h

        def ptr(a: Any, kind: str = "int64_t *") -> Any:
            return ffi.cast(kind, a.ctypes.data)

        args = [ptr(a) for a in (frame, ts, src, sport, dst, dport, seq, ack, flags, win, seglen, ip_len)]
        args.append(ptr(slow, "int8_t *"))
        tcp = self.tcp
        full, active, owned = tcp.packet, tcp.active, self.owned
        # .item(i): a Python int without a numpy scalar in between
        src_i, dst_i, sport_i, dport_i, flags_i, win_i, len_i = (
            a.item for a in (src, dst, sport, dport, flags, win, seglen)
        )
        retried = -1
        i = 0
        while True:
            i = lib.nt_run(h, i, n, *args)
            if i >= n:
                break
            s, t = pairs.get(i) or (src_i(i), dst_i(i))
            sp, dp = sport_i(i), dport_i(i)
            conv = active.get((s, sp, t, dp) if (s, sp) <= (t, dp) else (t, dp, s, sp))
            fl, w, ln = flags_i(i), win_i(i), len_i(i)
            if conv is not None:
                if conv.stream in owned:
                    self.pull(conv)
                elif (
                    i != retried and conv.orig is not None and fl & 0x17 == 0x10 and not slow[i] and w
                    and tcp._side(conv, s, sp)[4 if ln == 0 else 3]
                ):  # fmt: skip
                    self.own(conv)  # then C tries this packet again
                    retried = i
                    continue
            full(
                frame.item(i), ts.item(i), ver.item(i), s, sp, t, dp, seq.item(i), ack.item(i), fl, w, ln,
                ip_len.item(i), opts.get(i),
            )  # fmt: skip
            i += 1
        self.pull_all()

"""Zeek conn_state and history for live kernel connections, from what the kernel saw.

The collector's connection summary (`connection`, source kernel, one per socket at
tcp_destroy_sock) gets the same two fields a captured connection has. There are no
packets here, so each kernel event is turned into the packet(s) it implies on the wire
and fed to conn_summary.tcp_event: the letters, their repeat rules and the endpoint state
machine (and so conn_state) are the capture path's, defined once (anomalies.md §2).

What each event implies (local = the traced socket, peer = the other end):
- state changes: CLOSED -> SYN_SENT the local SYN; LISTEN -> SYN_RECEIVED the peer's SYN
  and the local SYN-ACK; SYN_SENT -> ESTABLISHED the peer's SYN-ACK and the local ACK;
  SYN_RECEIVED -> ESTABLISHED the peer's ACK; -> FIN_WAIT_1 / LAST_ACK the local FIN;
  -> CLOSE_WAIT, -> CLOSING, -> TIME_WAIT from FIN_WAIT_1/2 the peer's FIN (the last two
  answered at once by a local ACK, as tcp_fin() does); FIN_WAIT_1 -> FIN_WAIT_2,
  LAST_ACK -> CLOSED, CLOSING -> TIME_WAIT the peer's ACK of the local FIN;
- resets sent and received: a local or peer RST;
- retransmissions with payload: local data flagged retransmitted (`t`);
- siftr samples (one per packet at the default --ppl 1): data each way (`d`), peer data
  ending at or below the highest sequence the peer reached (`t`, Zeek's own test), pure ACKs
  the local side sent in ESTABLISHED, CLOSE_WAIT or FIN_WAIT_2 (an `out` sample without
  payload; in other states it is the SYN or a FIN), zero windows the local side
  advertised (`rcv_wnd` 0 on an `out` sample) and those of the peer (`snd_wnd` 0 on an
  `in` sample: the window of the peer's previous segment); an `in` sample without payload is a pure ACK unless the socket's next
  event says it was the peer's FIN or RST (tcp_probe sees those too, without flags).

Upper case is the originator, as in Zeek: the local side of a connection this host
opened, the remote side (the record's dst) of one it accepted. docs/collector.md
("Zeek conn_state and history") lists what the kernel cannot see.
Keep in sync with: analysis/flows/conn_summary.py, translators/tcp.py (state names, the
inferred TIME_WAIT), tests/test_collect_zeek_live.py.
"""

from __future__ import annotations

from typing import Any

from analysis.flows import conn_summary as zeek
from translators import tcp_lifecycle
from translators.kernel import KernelRecord

FIN, SYN, RST, ACK = zeek.FIN, zeek.SYN, zeek.RST, zeek.ACK
M32, HALF = 0xFFFFFFFF, 0x80000000
MAX_SOCKETS = 200_000  # sockets whose destroy was never seen (tcp provider off) are dropped oldest first
# FreeBSD state numbers (SiftrSample.conn_state) in which an `out` sample without payload is a pure ACK
_ACK_STATES = frozenset({4, 5, 9})  # ESTABLISHED, CLOSE_WAIT, FIN_WAIT_2
_PEER_FIN = frozenset(
    {
        ("ESTABLISHED", "CLOSE_WAIT"),
        ("SYN_RECEIVED", "CLOSE_WAIT"),
        ("FIN_WAIT_1", "CLOSING"),
        ("FIN_WAIT_1", "TIME_WAIT"),
        ("FIN_WAIT_2", "TIME_WAIT"),
    }
)
_PEER_ACKS_FIN = frozenset({("FIN_WAIT_1", "FIN_WAIT_2"), ("LAST_ACK", "CLOSED"), ("CLOSING", "TIME_WAIT")})
_KINDS = frozenset({"tcp_state", "tcp_reset", "tcp_retransmit", "siftr_sample", "connection", "tcp_lifecycle"})
# A socket's events before its first state change, kept to replay in time order with a
# tcp_lifecycle's changes (tcp --tcp-fold: its resets, retransmissions and samples stream
# while its changes wait in the kernel); at most this many, else it is read as it came.
EARLY_MAX = 16


class _Socket:
    __slots__ = (
        "z", "local_orig", "pending_ack", "peer_end", "listener", "fin_acked", "peer_fin", "steady_in", "steady_out",
        "early",
    )  # fmt: skip

    def __init__(self) -> None:
        self.z = zeek.ZeekFlow()
        self.peer_end: int | None = None  # highest sequence number after the peer's data seen so far
        self.listener = False  # a listening socket: no connection of its own
        self.fin_acked = False  # the peer acknowledged the local FIN
        self.peer_fin = False  # the peer's FIN arrived
        # samples of this direction can change nothing but peer_end (LiveSummaries.fold)
        self.steady_in = False
        self.steady_out = False
        self.local_orig: bool | None = None  # None: opened before tracing began (taken as the originator)
        self.pending_ack = False  # an `in` sample without payload, not yet known to be a pure ACK
        # (kind, record) before its first state change (EARLY_MAX); None once one was seen
        self.early: list[tuple[str, KernelRecord]] | None = []


def _remember(s: _Socket, kind: str, rec: KernelRecord) -> None:
    early = s.early
    if early is not None:
        if len(early) < EARLY_MAX:
            early.append((kind, rec))
        else:
            s.early = None


def _get(rec: KernelRecord, name: str) -> Any:
    return rec[name] if type(rec) is dict else getattr(rec, name)


def _set(rec: KernelRecord, name: str, value: Any) -> None:
    if type(rec) is dict:
        rec[name] = value
    else:
        setattr(rec, name, value)


class LiveSummaries:
    """Folds a live record stream; `fold` fills conn_state and history of kernel summaries."""

    def __init__(self) -> None:
        self.sockets: dict[int, _Socket] = {}

    def fold(self, records: list[KernelRecord]) -> list[KernelRecord]:
        """Feed a batch in arrival order; the batch is returned with its summaries filled."""
        kinds, feed, sockets = _KINDS, self._feed, self.sockets
        for rec in records:
            if type(rec) is dict:
                kind, cookie = rec["kind"], rec["sock_cookie"]
            else:
                kind = rec.kind  # type: ignore[union-attr]
                if kind not in kinds:
                    continue
                cookie = rec.sock_cookie  # type: ignore[union-attr]
                if kind == "siftr_sample" and (s := sockets.get(cookie or 0)) is not None:
                    # the collector's steady state, a sample per packet of an established
                    # connection whose letters are written: only an in-order peer segment
                    # moves anything (peer_end); the rest takes the full path
                    if rec.direction == "in":  # type: ignore[union-attr]
                        if s.steady_in and rec.snd_wnd:  # type: ignore[union-attr]
                            size = rec.data_sz  # type: ignore[union-attr]
                            if not size:
                                continue
                            end = (rec.th_seq + size) & M32  # type: ignore[union-attr]
                            if 0 < ((end - s.peer_end) & M32) < HALF:
                                s.peer_end = end
                                continue
                    elif s.steady_out and rec.rcv_wnd:  # type: ignore[union-attr]
                        continue
            if cookie and kind in kinds:
                feed(kind, cookie, rec)
        return records

    def _socket(self, cookie: int) -> _Socket:
        s = self.sockets.get(cookie)
        if s is None:
            if len(self.sockets) >= MAX_SOCKETS:
                del self.sockets[next(iter(self.sockets))]
            s = self.sockets[cookie] = _Socket()
        return s

    def _feed(self, kind: str, cookie: int, rec: KernelRecord) -> None:
        if kind == "tcp_lifecycle":
            self._lifecycle(cookie, rec)
            return
        if kind == "siftr_sample":
            s = self.sockets.get(cookie)
            s = s if s is not None else self._socket(cookie)
            _remember(s, kind, rec)
            self._sample(s, rec)
            z, orig = s.z, s.local_orig is not False
            peer_d, peer_a, local_d, local_a = ("d", "a", "D", "A") if orig else ("D", "A", "d", "a")
            seen = z.seen
            s.steady_in = z.quiet and peer_d in seen and peer_a in seen and s.peer_end is not None
            s.steady_in = s.steady_in and not s.pending_ack
            s.steady_out = z.quiet and local_d in seen and local_a in seen
            return
        if kind == "connection":
            if _get(rec, "source") == "kernel" and _get(rec, "proto") == "tcp":
                gone = self.sockets.pop(cookie, None)
                self._finish(gone if gone is not None else _Socket(), rec)
            return
        s = self._socket(cookie)
        s.steady_in = s.steady_out = False  # the next sample takes the full path and decides again
        if kind == "tcp_state":
            s.early = None
            self._state(s, _get(rec, "prev_state"), _get(rec, "state"), _get(rec, "active"))
        elif kind == "tcp_reset":
            _remember(s, kind, rec)
            local = _get(rec, "sender") == "local"
            self._settle(s, peer_fin_or_rst=not local)
            self._packet(s, local, RST)
        elif kind == "tcp_retransmit":
            _remember(s, kind, rec)
            self._settle(s)
            payload = _get(rec, "tcp_payload_len") or 0
            if payload > 0:
                self._packet(s, True, ACK, payload, retrans=True)

    def _lifecycle(self, cookie: int, rec: KernelRecord) -> None:
        """A folded socket's changes (and at its end its summary), as the records it streams
        without the fold (expand), fed in time order with what it streamed before them; at
        its end the lifecycle takes its summary's conn_state, history and direction_guessed."""
        parts: list[tuple[str, KernelRecord]] = [(p.kind, p) for p in tcp_lifecycle.expand_shared(rec)]
        s = self.sockets.get(cookie)
        if s is None or s.early is not None:  # no change of its own seen yet: begin again, in time order
            early = s.early if s is not None and s.early is not None else []
            self.sockets.pop(cookie, None)
            # a change's time is floored to the microsecond: within one, what streamed came first
            timed = [(_get(r, "ts_ns") // 1000, 0, k, r) for k, r in early]
            timed += [(_get(r, "ts_ns") // 1000, 1, k, r) for k, r in parts]
            parts = [(k, r) for _, _, k, r in sorted(timed, key=lambda t: (t[0], t[1]))]
        for kind, part in parts:
            self._feed(kind, cookie, part)
        end = parts[-1][1] if parts and parts[-1][0] == "connection" else None
        if end is not None:
            for name in ("conn_state", "history", "direction_guessed"):
                _set(rec, name, _get(end, name))

    # --- the packets each event implies ------------------------------------------------

    @staticmethod
    def _packet(s: _Socket, local: bool, flags: int, payload: int = 0, window: int = 1, retrans: bool = False) -> None:
        orig = s.local_orig is not False
        zeek.tcp_event(s.z, local == orig, flags, 1, payload, window, retrans, False)

    def _settle(self, s: _Socket, peer_fin_or_rst: bool = False) -> None:
        """The socket's next event decides what an `in` sample without payload was."""
        if s.pending_ack:
            s.pending_ack = False
            z = s.z
            if not peer_fin_or_rst and not (z.quiet and ("a" if s.local_orig is not False else "A") in z.seen):
                self._packet(s, False, ACK)

    def _state(self, s: _Socket, prev: str, new: str, active: bool | None) -> None:
        self._settle(s, peer_fin_or_rst=(prev, new) in _PEER_FIN)
        if s.local_orig is None and active is not None:
            s.local_orig = active
        if new == "LISTEN":
            s.listener = True
        pkt = self._packet
        if (prev, new) == ("CLOSED", "SYN_SENT"):
            pkt(s, True, SYN)
        elif (prev, new) == ("LISTEN", "SYN_RECEIVED"):
            pkt(s, False, SYN)
            pkt(s, True, SYN | ACK)
        elif (prev, new) == ("SYN_SENT", "ESTABLISHED"):
            pkt(s, False, SYN | ACK)
            pkt(s, True, ACK)
        elif (prev, new) == ("SYN_RECEIVED", "ESTABLISHED"):
            pkt(s, False, ACK)
        elif new in ("FIN_WAIT_1", "LAST_ACK") and prev != new:
            pkt(s, True, FIN | ACK)
        elif (prev, new) in _PEER_FIN:
            s.peer_fin = True
            s.fin_acked = s.fin_acked or prev == "FIN_WAIT_1" and new == "TIME_WAIT"
            pkt(s, False, FIN | ACK)
            if new != "CLOSE_WAIT":  # tcp_fin() ACKs at once except in ESTABLISHED (delayed)
                pkt(s, True, ACK)
        elif (prev, new) in _PEER_ACKS_FIN:
            s.fin_acked = True
            pkt(s, False, ACK)

    def _sample(self, s: _Socket, rec: KernelRecord) -> None:
        """One siftr sample. The hot path (a sample per packet): once both ends are
        established and the side's letter is written, a plain segment only adds bytes."""
        if type(rec) is dict:
            size, direction, snd_wnd = rec["data_sz"] or 0, rec["direction"], rec["snd_wnd"]
        else:
            size, direction, snd_wnd = rec.data_sz or 0, rec.direction, rec.snd_wnd  # type: ignore[union-attr]
        if direction == "poll":
            return  # siftr-poll's sample: no packet behind it, no letter (the states and counters tell)
        if s.pending_ack:
            self._settle(s)
        z = s.z
        orig = s.local_orig is not False
        if direction == "in":
            # tcp_probe runs before the segment is processed: snd_wnd is the window of the
            # peer's previous segment, so each `in` sample at 0 stands for one zero-window
            # segment of the peer's, one segment late (the count matches; the last may lack)
            if snd_wnd == 0:
                z.letter("w", not orig)
            if not size:
                s.pending_ack = True
                return
            # below what the peer already sent: a retransmission (Zeek's own notion of `t`)
            end = (_get(rec, "th_seq") + size) & M32
            seen = s.peer_end
            retrans = seen is not None and not 0 < ((end - seen) & M32) < HALF
            if not retrans:
                s.peer_end = end
                if z.quiet and ("d" if orig else "D") in z.seen:
                    z.sizes[1 if orig else 0] += size
                    return
            self._packet(s, False, ACK, size, retrans=retrans)
            return
        window = _get(rec, "rcv_wnd")
        window = 1 if window is None else window
        if size:
            if window and z.quiet and ("D" if orig else "d") in z.seen:
                z.sizes[0 if orig else 1] += size
                return
            self._packet(s, True, ACK, size, window)
        elif _get(rec, "conn_state") in _ACK_STATES:
            if window and z.quiet and ("A" if orig else "a") in z.seen:
                return
            self._packet(s, True, ACK, 0, window)

    def _finish(self, s: _Socket, rec: KernelRecord) -> None:
        self._settle(s)
        z = s.z
        if s.listener or not z.history:
            return  # a listener, or a socket nothing was seen of: no connection to summarise
        if z.sizes == [0, 0]:
            self._data_from_counters(s, rec)
        _set(rec, "conn_state", zeek.conn_state(z, "tcp"))
        _set(rec, "history", zeek.history(z) or None)
        # its opening was not seen (tracing began, or the collector restarted, after it):
        # the local side is taken as the originator, a guess the record says it is
        _set(rec, "direction_guessed", s.local_orig is None)

    @staticmethod
    def _data_from_counters(s: _Socket, rec: KernelRecord) -> None:
        """No sample counted payload (siftr off): the final counters say whether each side
        sent data. They are in sequence space: bytes_acked holds the local SYN (connect
        only) and FIN once acknowledged, bytes_received the peer's FIN. The `d` letters go
        after the handshake, the originator's first: their real order is not known."""
        z = s.z
        local = 0 if s.local_orig is not False else 1
        sent = (_get(rec, "bytes_acked") or 0) - (1 if s.local_orig else 0) - (1 if s.fin_acked else 0)
        got = (_get(rec, "bytes_received") or 0) - (1 if s.peer_fin else 0)
        z.sizes[local], z.sizes[1 - local] = max(sent, 0), max(got, 0)
        at = next((i for i, ch in enumerate(z.history) if ch not in "^ShHsA"), len(z.history))
        letters = [ch for ch, n in (("D", z.sizes[0]), ("d", z.sizes[1])) if n > 0 and ch not in z.seen]
        z.history[at:at] = letters
        z.seen.update(letters)


def fold_all(records: list[KernelRecord]) -> list[KernelRecord]:
    """One batch that holds whole connections (tests, a replayed file)."""
    return LiveSummaries().fold(records)

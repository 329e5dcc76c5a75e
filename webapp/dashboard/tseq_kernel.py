"""The time-sequence graph of a live connection, from kernel records (no packets).

A collector records no packets, but its SIFTR samples (or, without siftr, tcpdebug
snapshots) carry the local socket's send state: ``snd_una`` (the peer's cumulative ACK),
``snd_nxt`` (the highest sequence sent) and ``snd_wnd`` (the window the peer advertised),
and every ``tcp_retransmit`` record names the retransmitted range (``tcp_seq``). That is a
tcptrace graph of the sending side (issue 18 item 4): the data line is snd_nxt, the ACK
line snd_una, the window line snd_una + snd_wnd, retransmissions are points at their
sequence, and SACKs, which the kernel records only as a count (``sacked_out``, segments),
are the highest SACKed byte estimated as snd_una + sacked_out x mss where the sample has
both. Sequence numbers are relative to the first snd_una seen (modulo 2^32).
Keep in sync with: detail.tseq (the packet-based graph; same keys), js/connection.js.
"""

from __future__ import annotations

from typing import Any

from webapp.dashboard.tables import SiftrSample, TcpDebugSnapshot, TcpRetransmit

MAX_POINTS = 100_000
U32 = 1 << 32
KEYS = ("t", "data", "retrans", "sack", "ack", "win")


def _samples(host: str, uuid: str) -> tuple[str, list[tuple[Any, ...]]]:
    """(kind, rows of (ts_wall, ts_ns, snd_una, snd_nxt, snd_wnd, sacked_out, mss)), oldest first."""
    cols = ("ts_wall", "ts_ns", "snd_una", "snd_nxt", "snd_wnd", "sacked_out", "mss")
    for kind, model in (("siftr_sample", SiftrSample), ("tcpdebug_snapshot", TcpDebugSnapshot)):
        qs = model.objects.filter(host_id=host, conn_uuid=uuid, snd_una__isnull=False, snd_nxt__isnull=False)
        rows = list(qs.order_by("-ts_ns").values_list(*cols)[:MAX_POINTS])
        if rows:
            rows.reverse()
            return kind, rows
    return "", []


def tseq(host: str, uuid: str) -> dict[str, Any]:
    """Aligned series (the keys of KEYS) and ``source``: the record kind they come from."""
    out: dict[str, Any] = {k: [] for k in KEYS}
    kind, rows = _samples(host, uuid)
    if not rows:
        return out
    base: int = rows[0][2]

    def rel(v: int) -> int:
        return (v - base) % U32

    points: list[tuple[int, dict[str, Any]]] = []
    for t, ts_ns, una, nxt, wnd, sacked, mss in rows:
        sack = rel(una) + sacked * mss if sacked and mss else None
        win = rel(una) + wnd if wnd is not None else None
        points.append((ts_ns, {"t": t, "data": rel(nxt), "retrans": None, "sack": sack, "ack": rel(una), "win": win}))
    first_ns = rows[0][1]
    retransmits = (
        TcpRetransmit.objects.filter(host_id=host, conn_uuid=uuid, ts_ns__gte=first_ns, tcp_seq__isnull=False)
        .order_by("ts_ns")
        .values_list("ts_wall", "ts_ns", "tcp_seq")[:MAX_POINTS]
    )
    for t, ts_ns, seq in retransmits:
        points.append((ts_ns, {"t": t, "data": None, "retrans": rel(seq), "sack": None, "ack": None, "win": None}))
    points.sort(key=lambda p: p[0])
    for _, point in points:
        for k in KEYS:
            out[k].append(point[k])
    out["source"] = kind
    return out

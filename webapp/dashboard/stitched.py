"""Both ends of one TCP connection, stitched: the peer's half found, the two clocks aligned.

When both ends were traced -- two hosts each with a collector, or one host over
loopback (two sockets, two rows) -- each end is its own Connection row. The peer of
a row is the row with the mirrored 4-tuple (its src:sport is our dst:dport and the
other way round) whose lifetime overlaps ours (webapp/dashboard/stitch_match.py, the
rule the Connections list folds both ends by), and, when both have SIFTR samples, which shares the sequence space:
a segment one sent is one the other received (same sequence and ACK numbers, so the
same ISNs), which tells a reused 4-tuple apart. Halves are ordered opener first, so
both pages show the same picture. Two hosts' times are put on the opener's clock
by the offset webapp/dashboard/stitch_clock.py estimates (with its error bound); one
host's halves share its clock.

For dashboard users only (a logged-in session): the host-token API (/api/) keeps
reading one host's data (issue 15). Rendered by templates/dashboard/_stitched.html
in the connection page. Keep in sync with docs/dashboard.md (Both ends).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from webapp.dashboard import stitch_clock, stitch_match
from webapp.dashboard.api import api
from webapp.dashboard.tables import SiftrSample, SkbDrop, TcpRetransmit, TcpStateChange
from webapp.http import json_error
from webapp.traces import folded, owner
from webapp.traces.models import Connection

MAX_SEGMENTS = 20_000  # SIFTR samples per side read for matching and the offset (the earliest)
MAX_MARKS = 2_000  # SIFTR ticks per side drawn
MAX_EVENTS = 500  # rows of the merged event table
WIDTH = 1000.0  # the SVG's user units


@dataclass
class Half:
    conn: Connection
    side: stitch_clock.Side
    states: list[dict[str, Any]]
    retransmits: list[dict[str, Any]]
    drops: list[dict[str, Any]]
    siftr: list[dict[str, Any]]


def _segments(conn: Connection) -> list[dict[str, Any]]:
    rows = SiftrSample.objects.filter(host_id=conn.host_id, conn_uuid=conn.conn_uuid).order_by("ts_ns")
    cols = ("ts_wall", "direction", "th_seq", "th_ack", "srtt", "snd_cwnd", "sent_inflight_bytes")
    return list(rows.values(*cols)[:MAX_SEGMENTS])


def _side(siftr: list[dict[str, Any]], states: list[dict[str, Any]]) -> stitch_clock.Side:
    return stitch_clock.Side(
        states=[stitch_clock.StateChange(s["ts_wall"], s["state"], s["active"]) for s in states],
        segments=[
            stitch_clock.Segment(s["ts_wall"], s["direction"], s["th_seq"], s["th_ack"])
            for s in siftr
            if s["th_seq"] is not None and s["th_ack"] is not None
        ],
    )


def _states(conn: Connection) -> list[dict[str, Any]]:
    rows = TcpStateChange.objects.filter(host_id=conn.host_id, conn_uuid=conn.conn_uuid).order_by("ts_ns", "seq")
    names = ("ts_wall", "prev_state", "state", "active", "caused_by", "inferred")
    states = [(r["ts_wall"], r) for r in rows.values(*names)]
    # tcp --tcp-fold: the changes a stored lifecycle stands for, among the streamed ones
    states += [
        (ch.ts_wall, {n: getattr(ch, n) for n in names}) for ch in folded.state_changes(conn.host_id, conn.conn_uuid)
    ]
    return [r for _, r in sorted(states, key=lambda s: s[0])]


def half(conn: Connection) -> Half:
    siftr, states = _segments(conn), _states(conn)
    where = {"host_id": conn.host_id, "conn_uuid": conn.conn_uuid}
    retransmits = list(
        TcpRetransmit.objects.filter(**where)
        .order_by("ts_ns")
        .values("ts_wall", "retrans_kind", "tcp_seq")[:MAX_EVENTS]
    )
    drops = list(SkbDrop.objects.filter(**where).order_by("ts_ns").values("ts_wall", "drop_reason_str")[:MAX_EVENTS])
    return Half(conn, _side(siftr, states), states, retransmits, drops, siftr)


def candidates(conn: Connection) -> list[Connection]:
    """Rows with the mirrored tuple whose lifetime overlaps this one's (any host): stitch_match's rule."""
    q = stitch_match.candidates_q(conn)
    if q is None:
        return []
    rows = Connection.objects.filter(q).exclude(pk=conn.pk).order_by("first_seen", "pk")
    return [c for c in rows[:20] if stitch_match.matches(conn, c)]


def find_peer(conn: Connection, mine: Half | None = None) -> tuple[Half, Half] | None:
    """(this half, the peer's half), or None when the other end was not traced."""
    found = candidates(conn)
    if not found:
        return None
    mine = mine or half(conn)
    best: tuple[tuple[int, float], Half] | None = None
    for other in found:
        theirs = half(other)
        shared = stitch_clock.shared_segments(mine.side, theirs.side)
        if mine.side.segments and theirs.side.segments and shared == 0:
            continue  # both sampled, no segment in common: another connection on a reused tuple
        score = (shared, -stitch_match.distance(conn, other))
        if best is None or score > best[0]:
            best = (score, theirs)
    return None if best is None else (mine, best[1])


def _ordered(one: Half, two: Half) -> tuple[Half, Half]:
    """The opener first (then by host and uuid): the same order from either page."""
    return (one, two) if stitch_match.opener_key(one.conn) <= stitch_match.opener_key(two.conn) else (two, one)


def clock(a: Half, b: Half) -> dict[str, Any]:
    """How B's times are put on A's clock."""
    if a.conn.host_id == b.conn.host_id and a.conn.boot_id == b.conn.boot_id:
        return {"same_clock": True, "aligned": True, "offset_s": 0.0, "error_s": 0.0}
    est = stitch_clock.estimate(a.side, b.side)
    if est is None:
        return {"same_clock": False, "aligned": False, "offset_s": None, "error_s": None}
    return {"same_clock": False, "aligned": est.consistent, **est.as_json()}


def stitched(conn: Connection) -> dict[str, Any] | None:
    """The stitched view's data for the connection page, or None without a traced peer."""
    pair = find_peer(conn)
    if pair is None:
        return None
    a, b = _ordered(*pair)
    offset = clock(a, b)
    shift = offset["offset_s"] if offset["aligned"] else 0.0
    halves = [_half_json(a, 0.0, "A"), _half_json(b, shift, "B")]
    times = [t for h in halves for t in h["times"]]
    t0, t1 = (min(times), max(times)) if times else (0.0, 1.0)
    span = max(t1 - t0, 1e-6)
    for h in halves:
        _draw(h, t0, span)
    events = sorted((e for h in halves for e in h.pop("events")), key=lambda e: (e["t"], e["side"]))
    for e in events:
        e["at_ms"] = (e["t"] - t0) * 1000.0
    return {
        "halves": halves,
        "clock": offset,
        "start": t0,
        "span_ms": span * 1000.0,
        "events": events[:MAX_EVENTS],
        "this": "A" if conn.pk == a.conn.pk else "B",
    }


def _half_json(h: Half, shift: float, name: str) -> dict[str, Any]:
    """One half on the common axis: its times minus `shift` (B's offset)."""
    events: list[dict[str, Any]] = []
    for s in h.states:
        events.append({"t": s["ts_wall"] - shift, "side": name, "what": f"{s['prev_state']} → {s['state']}"})
    for r in h.retransmits:
        events.append({"t": r["ts_wall"] - shift, "side": name, "what": f"retransmit ({r['retrans_kind'] or '?'})"})
    for d in h.drops:
        events.append({"t": d["ts_wall"] - shift, "side": name, "what": f"drop {d['drop_reason_str'] or '?'}"})
    siftr_t = [s["ts_wall"] - shift for s in h.siftr[:MAX_MARKS]]
    c = h.conn
    return {
        "name": name,
        "host": c.host_id,
        "conn_uuid": c.conn_uuid,
        "url": stitch_match.link(c),
        "tuple": f"{c.src}:{c.sport} → {c.dst}:{c.dport}",
        "opener": c.active,
        "state": c.state,
        "counts": {
            "states": len(h.states),
            "siftr": len(h.siftr),
            "retransmits": len(h.retransmits),
            "drops": len(h.drops),
        },
        "times": [e["t"] for e in events] + siftr_t,
        "siftr_t": siftr_t,
        "events": events,
        "state_t": [(s["ts_wall"] - shift, s["state"]) for s in h.states],
        "retrans_t": [r["ts_wall"] - shift for r in h.retransmits],
        "drop_t": [d["ts_wall"] - shift for d in h.drops],
    }


def _draw(h: dict[str, Any], t0: float, span: float) -> None:
    """SVG x positions (0..WIDTH) of everything in one half's lane."""

    def x(t: float) -> float:
        return round((t - t0) / span * WIDTH, 2)

    states = h.pop("state_t")
    h["state_bars"] = [
        {"x": x(t), "w": max(x(states[i + 1][0]) - x(t), 1.0) if i + 1 < len(states) else max(WIDTH - x(t), 1.0),
         "state": state}
        for i, (t, state) in enumerate(states)
    ]  # fmt: skip
    h["siftr_x"] = [x(t) for t in h.pop("siftr_t")]
    h["retrans_x"] = [x(t) for t in h.pop("retrans_t")]
    h["drop_x"] = [x(t) for t in h.pop("drop_t")]
    h.pop("times")


@api("GET")
def api_stitched(request: HttpRequest, uuid: str) -> HttpResponse:
    """GET /api/dash/connections/<uuid>/stitched[?host=H]: the stitched view's data, 404 without a peer."""
    conn = owner.connection_or_error(uuid, request.GET.get("host") or None)
    if not isinstance(conn, Connection):
        return conn
    both = stitched(conn)
    if both is None:
        return json_error(404, "the other end of this connection was not traced")
    return JsonResponse(both)

"""The connection detail page's data: one JSON document assembled from the record tables.

State timeline (durations, who caused each transition, resets and retransmissions in
between), SIFTR series (columnar, for uPlot), the time-sequence graph's aligned series,
tcpdebug snapshots, the connection's skb lifecycles and drops, and its alerts.
Keep in sync with: js/connection.js (field names), webapp/traces/models.py.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q, Sum, Value
from django.db.models.functions import Coalesce

from translators.records import tcp_flags_str
from translators.tcp import FREEBSD_INITIAL_SSTHRESH
from webapp.dashboard import alert_versions, retrans_runs, tseq_kernel
from webapp.dashboard.tables import (
    Alert,
    ConnectionSummary,
    SiftrSample,
    SkbDrop,
    SkbEvent,
    TcpDebugSnapshot,
    TcpReset,
    TcpRetransmit,
    TcpSegment,
    TcpStateChange,
)
from webapp.traces import folded
from webapp.traces.models import Connection

MAX_POINTS = 100_000  # SIFTR samples / segments per chart (the newest)
MAX_ROWS = 500  # tcpdebug snapshots, drops, alerts
MAX_BUFFERS = 200  # skb lifecycles
# ssthresh starts at "infinity" (the translators map it to FreeBSD's 65535 << 14 bytes): not a value to plot.
INFINITE_SSTHRESH = FREEBSD_INITIAL_SSTHRESH
RETRANS_FLAGS = frozenset({"retransmission", "fast_retransmission", "spurious_retransmission"})


def owner(rec: Any) -> str:
    if rec.comm is None and rec.pid is None:
        return "kernel" if rec.ctx == "softirq" else "unknown"
    return f"{rec.comm or '?'} (pid {rec.tgid if rec.tgid is not None else rec.pid})"


def who(change: Any, conn: Connection) -> str:
    """The process or the remote peer that caused a state change."""
    if change.caused_by == "peer":
        return f"remote peer {conn.dst}:{conn.dport}" if conn.dst else "remote peer"
    if change.caused_by == "local" or change.ctx == "task":
        return owner(change)
    if change.inferred:
        return "nettrail (timer)"
    return owner(change)


def timeline(conn: Connection) -> list[dict[str, Any]]:
    changes: list[Any] = list(
        TcpStateChange.objects.filter(host_id=conn.host_id, conn_uuid=conn.conn_uuid).order_by("ts_ns", "seq")
    )
    # tcp --tcp-fold: the changes a stored lifecycle stands for, among the streamed ones
    changes = sorted([*changes, *folded.state_changes(conn.host_id, conn.conn_uuid)], key=lambda ch: ch.ts_ns)
    items: list[tuple[int, dict[str, Any]]] = []
    for i, ch in enumerate(changes):
        nxt = changes[i + 1] if i + 1 < len(changes) else None
        if nxt is not None:
            dur: float | None = (nxt.ts_ns - ch.ts_ns) / 1e9
        else:
            dur = None if ch.state != "CLOSED" else 0.0
        item = {"type": "state", "ts": ch.ts_wall, "state": ch.state, "prev_state": ch.prev_state, "duration": dur}
        item.update({"who": who(ch, conn), "caused_by": ch.caused_by, "inferred": ch.inferred})
        items.append((ch.ts_ns, item))
    for rst in TcpReset.objects.filter(host_id=conn.host_id, conn_uuid=conn.conn_uuid).order_by("ts_ns")[:MAX_ROWS]:
        text = f"RST {'sent' if rst.sender == 'local' else 'received from the peer'} in {rst.state or '?'}"
        text += f" ({rst.reason})" if rst.reason else ""
        items.append((rst.ts_ns, {"type": "reset", "ts": rst.ts_wall, "text": text}))
    retransmits = list(
        TcpRetransmit.objects.filter(host_id=conn.host_id, conn_uuid=conn.conn_uuid)
        .order_by("ts_ns", "seq")
        .values_list("ts_ns", "ts_wall", "tcp_payload_len", "retrans_kind")
    )
    items.extend(retrans_runs.runs(retransmits, [ts for ts, _ in items]))
    items.sort(key=lambda x: x[0])
    return [item for _, item in items]


def marks(host: str, uuid: str) -> dict[str, list[float]]:
    """Wall times of the retransmissions and resets, for the charts' aggregated markers."""
    return {
        "retransmit": list(
            TcpRetransmit.objects.filter(host_id=host, conn_uuid=uuid)
            .order_by("ts_ns")
            .values_list("ts_wall", flat=True)[: retrans_runs.MAX_MARKS]
        ),
        "reset": list(
            TcpReset.objects.filter(host_id=host, conn_uuid=uuid)
            .order_by("ts_ns")
            .values_list("ts_wall", flat=True)[:MAX_ROWS]
        ),
    }


def siftr(host: str, uuid: str) -> dict[str, list[Any]]:
    cols = ("ts_wall", "snd_cwnd", "snd_ssthresh", "srtt", "rttvar", "snd_wnd", "rcv_wnd", "sent_inflight_bytes")
    rows = list(
        SiftrSample.objects.filter(host_id=host, conn_uuid=uuid).order_by("-ts_ns").values_list(*cols)[:MAX_POINTS]
    )
    rows.reverse()
    out: dict[str, list[Any]] = {
        k: [] for k in ("t", "cwnd", "ssthresh", "srtt", "rttvar", "snd_wnd", "rcv_wnd", "inflight")
    }
    for t, cwnd, ssthresh, srtt, rttvar, snd_wnd, rcv_wnd, inflight in rows:
        out["t"].append(t)
        out["cwnd"].append(cwnd)
        out["ssthresh"].append(ssthresh if ssthresh is not None and ssthresh < INFINITE_SSTHRESH else None)
        out["srtt"].append(srtt)
        out["rttvar"].append(rttvar)
        out["snd_wnd"].append(snd_wnd)
        out["rcv_wnd"].append(rcv_wnd)
        out["inflight"].append(inflight)
    return out


def tseq(conn: Connection) -> dict[str, Any]:
    """Aligned series for the time-sequence graph of the direction carrying most data
    (from the packets; without packets from the kernel records, tseq_kernel.py)."""
    cols = (
        "ts_wall",
        "src",
        "sport",
        "tcp_seq",
        "tcp_ack",
        "rel_seq",
        "tcp_payload_len",
        "analysis",
        "opt_sack_blocks",
        "window_scaled",
    )
    rows = list(
        TcpSegment.objects.filter(host_id=conn.host_id, conn_uuid=conn.conn_uuid)
        .order_by("-ts_ns")
        .values_list(*cols)[:MAX_POINTS]
    )
    rows.reverse()
    out: dict[str, Any] = {k: [] for k in ("t", "data", "retrans", "sack", "ack", "win")}
    if not rows:  # no packets (a live connection): the kernel's view of the send side
        return tseq_kernel.tseq(conn.host_id, conn.conn_uuid)
    out["source"] = "tcp_segment"
    sent: dict[tuple[str, int], int] = {}
    for r in rows:
        sent[(r[1], r[2])] = sent.get((r[1], r[2]), 0) + (r[6] or 0)
    data_side = max(sent, key=lambda k: sent[k])
    isn = next(((r[3] - (r[5] or 0)) for r in rows if (r[1], r[2]) == data_side and r[3] is not None), 0)
    for t, src, sport, seq, ack, _rel, length, analysis, sacks, window in rows:
        point: dict[str, Any] = {"data": None, "retrans": None, "sack": None, "ack": None, "win": None}
        if (src, sport) == data_side:
            if not length or seq is None:
                continue
            rel = (seq - isn) % (1 << 32)
            point["retrans" if RETRANS_FLAGS & set(analysis or ()) else "data"] = rel
        else:
            if ack is not None:
                point["ack"] = (ack - isn) % (1 << 32)
                if window is not None:  # the receive window the peer advertised, from its ACK
                    point["win"] = point["ack"] + window
            if sacks:
                point["sack"] = max((right - isn) % (1 << 32) for _left, right in sacks)
            if point["ack"] is None and point["sack"] is None:
                continue
        out["t"].append(t)
        for k, v in point.items():
            out[k].append(v)
    return out


def skbs(host: str, uuid: str) -> list[dict[str, Any]]:
    """Each buffer of the connection with its stages in order (newest buffers)."""
    uids = list(
        SkbEvent.objects.filter(host_id=host, conn_uuid=uuid, skb_uid__isnull=False)
        .order_by("-ts_ns")
        .values_list("skb_uid", flat=True)
        .distinct()[:MAX_BUFFERS]
    )
    return lifecycles(uids, host)


def lifecycles(uids: list[int], host: str | None = None) -> list[dict[str, Any]]:
    """Stages of each buffer in ``uids`` (plus its drop, if any), oldest buffer first.

    skb_uids are per host: with `host` only that host's buffers; without, a buffer is
    (host, skb_uid) and each carries its host_id."""
    by_uid: dict[tuple[str, int], dict[str, Any]] = {}
    events = SkbEvent.objects.filter(skb_uid__in=uids).order_by("ts_ns")
    drops = SkbDrop.objects.filter(skb_uid__in=uids)
    if host is not None:
        events, drops = events.filter(host_id=host), drops.filter(host_id=host)
    cols = ("host_id", "skb_uid", "ts_wall", "ts_ns", "stage", "since_prev_ns", "end", "conn_uuid", "if_name", "len")
    for ev in events.values(*cols, "approx"):
        b = by_uid.setdefault(
            (ev["host_id"], ev["skb_uid"]),
            {
                "host_id": ev["host_id"],
                "skb_uid": ev["skb_uid"],
                "first": ev["ts_wall"],
                "first_ns": ev["ts_ns"],
                "stages": [],
                "end": None,
                "conn_uuid": None,
                "drop": None,
            },
        )
        b["stages"].append(
            {
                "stage": ev["stage"],
                "ts": ev["ts_wall"],
                "since_prev_ns": ev["since_prev_ns"],
                "if_name": ev["if_name"],
                "len": ev["len"],
                # no tracepoint: stamped at the recvmsg's return, an upper bound (translators/skb.py)
                "inferred": "ts_ns" in (ev["approx"] or []),
            }
        )
        b["end"] = ev["end"] or b["end"]
        b["conn_uuid"] = b["conn_uuid"] or ev["conn_uuid"]
        b["last_ns"] = ev["ts_ns"]
    for d in drops.values("host_id", "skb_uid", "ts_wall", "ts_ns", "drop_reason_str", "drop_location", "conn_uuid"):
        b = by_uid.setdefault(
            (d["host_id"], d["skb_uid"]),
            {
                "host_id": d["host_id"],
                "skb_uid": d["skb_uid"],
                "first": d["ts_wall"],
                "first_ns": d["ts_ns"],
                "stages": [],
                "end": None,
                "conn_uuid": None,
                "drop": None,
            },
        )
        since = d["ts_ns"] - b.get("last_ns", d["ts_ns"])
        b["stages"].append(
            {
                "stage": f"drop: {d['drop_reason_str']}",
                "ts": d["ts_wall"],
                "since_prev_ns": since,
                "if_name": None,
                "len": None,
            }
        )
        b["drop"] = {"reason": d["drop_reason_str"], "location": d["drop_location"]}
        b["end"] = "dropped"
        b["conn_uuid"] = b["conn_uuid"] or d["conn_uuid"]
        b["last_ns"] = d["ts_ns"]
    out = sorted(by_uid.values(), key=lambda b: b["first_ns"])
    for b in out:
        b["total_ns"] = b.pop("last_ns", b["first_ns"]) - b["first_ns"]
        b.pop("first_ns")
    return out


def tcpdebug(host: str, uuid: str) -> list[dict[str, Any]]:
    cols = (
        "ts_wall",
        "direction",
        "prureq_str",
        "state",
        "snd_una",
        "snd_nxt",
        "rcv_nxt",
        "snd_cwnd",
        "snd_ssthresh",
        "srtt_us",
        "rto_ms",
        "ca_state",
        "tcp_flags",
    )
    rows = list(
        TcpDebugSnapshot.objects.filter(host_id=host, conn_uuid=uuid).order_by("ts_ns").values(*cols)[:MAX_ROWS]
    )
    for r in rows:
        r["flags"] = tcp_flags_str(r.pop("tcp_flags")) if r["tcp_flags"] is not None else None
    return rows


def alerts(host: str, uuid: str) -> list[dict[str, Any]]:
    """The connection's own alerts and the grouped findings (one per fix target, issue 34)
    whose newest version lists it among its member sockets (``members`` says how many)."""
    cols = ("id", "host_id", "start", "end", "severity", "rule_id", "status", "count", "message", "members")
    own = Q(conn_uuid=uuid)
    # a JSON list of ids: matched as text (both databases), within the host's grouped alerts
    member = Q(members__isnull=False, member_conn_uuids__icontains=uuid)
    newest = alert_versions.latest(Alert.objects.filter(own | member, host_id=host))
    return list(newest.order_by("-start").values(*cols)[:MAX_ROWS])


def retransmitted_segments(records: Any) -> int:
    """Segments the tcp_retransmit records stand for (TcpRetransSegs' unit: a record is one
    skb, `segs` of them for a GSO skb; a record without segs counts one)."""
    total = _sent(records).aggregate(n=Sum(Coalesce("segs", Value(1))))["n"]
    return int(total or 0)


def _sent(records: Any) -> Any:
    """Retransmissions the stack made (err 0, or unknown on kernels whose tracepoint has no
    err): a failed one (-EBUSY while the queue drains) counts in neither ss nor nstat."""
    return records.filter(Q(err__isnull=True) | Q(err=0))


def retransmitted(host: str, uuid: str) -> dict[str, Any]:
    """What this socket retransmitted, from its tcp_retransmit records: segments (as
    `ss -tin` retrans's total and nstat TcpRetransSegs count) and payload bytes (ss's
    bytes_retrans), shown apart from the bytes sent, which include them."""
    records = _sent(TcpRetransmit.objects.filter(host_id=host, conn_uuid=uuid))
    agg = records.aggregate(segs=Sum(Coalesce("segs", Value(1))), payload=Sum("tcp_payload_len"))
    return {"retrans_segs": int(agg["segs"] or 0), "retrans_bytes_out": int(agg["payload"] or 0)}


SUMMARY_FIELDS = (
    "handshake_rtt_us",
    "conn_state",
    "history",
    "source",
    "segs_in",
    "segs_out",
    "retrans_bytes",
    "lifetime_ns",
    "direction_guessed",  # a capture without the SYN: which end opened it is a guess
)


def summary_fields(host: str, uuid: str) -> dict[str, Any]:
    """Fields of the latest connection summary record, when the connection has one."""
    row = (
        ConnectionSummary.objects.filter(host_id=host, conn_uuid=uuid)
        .order_by("-ts_ns")
        .values(*SUMMARY_FIELDS)
        .first()
    )
    return dict(row) if row else {}

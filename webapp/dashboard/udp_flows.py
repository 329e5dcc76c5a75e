"""The UDP page's flows: one row per host, source, destination and process, each datagram once.

A datagram may be recorded up to four times: at the sender's device and the receiver's
(the udp provider's per-packet records, source first) and at the send and receive calls
(udp and udp-calls, local first). A receive call's record is turned round here into the
datagram's direction (its peer is the source), so that every row reads source ->
destination. Within a row the device's and the calls' counts, sent or received, are views
of the same datagrams (on loopback one host sends and receives each), so the largest is
taken, never a sum; a call's row whose local end is the wildcard address (an unbound
socket) joins the device's row that names that end's concrete address. The payload is the device's UDP payload or the bytes the calls
moved, of the same view.
Keep in sync with: translators/udp.py (which records carry what), js/udp.js.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Max, Min, Q, QuerySet, Sum

from translators.udp import CALL_HOOKS

GROUP = ("host_id", "src", "sport", "dst", "dport", "comm", "conn_uuid", "probe", "hook")


def flows(qs: QuerySet[Any], limit: int) -> list[dict[str, Any]]:
    """The newest `limit` flows of the UdpDatagram rows in `qs`."""
    groups = (
        qs.values(*GROUP)
        .annotate(
            datagrams=Count("id"),
            payload=Sum("payload_length"),
            moved=Sum("bytes"),
            errors=Count("id", filter=Q(error__isnull=False) & ~Q(error=0)),
            icmp_errors=Count("id", filter=Q(icmp_error__isnull=False)),
            first=Min("ts_wall"),
            last=Max("ts_wall"),
        )
        .order_by("-last")[: 4 * limit]
    )
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for g in groups:
        call = g["hook"] in CALL_HOOKS
        src, sport, dst, dport = g["src"], g["sport"], g["dst"], g["dport"]
        if call and g["probe"] == "receive":  # local first: the peer sent it
            src, sport, dst, dport = dst, dport, src, sport
        key = (g["host_id"], src, sport, dst, dport, g["comm"], g["conn_uuid"])
        row = rows.setdefault(
            key,
            {
                "host_id": g["host_id"], "src": src, "sport": sport, "dst": dst, "dport": dport, "comm": g["comm"],
                "conn_uuid": g["conn_uuid"], "views": {}, "errors": 0, "icmp_errors": 0, "first": g["first"],
                "last": g["last"],
            },
        )  # fmt: skip
        view = row["views"].setdefault((g["probe"], call), [0, 0])
        view[0] += g["datagrams"]
        view[1] += (g["moved"] if call else g["payload"]) or 0
        row["errors"] += g["errors"]
        row["icmp_errors"] += g["icmp_errors"]
        row["first"] = min(row["first"], g["first"])
        row["last"] = max(row["last"], g["last"])
    _fold_wildcards(rows)
    out = []
    for row in rows.values():
        datagrams, payload = max(row.pop("views").values())  # the view that saw most (then most bytes)
        out.append({**row, "datagrams": datagrams, "bytes": payload})
    out.sort(key=lambda r: r["last"], reverse=True)
    return out[:limit]


WILDCARDS = ("0.0.0.0", "::")


def _fold_wildcards(rows: dict[tuple[Any, ...], dict[str, Any]]) -> None:
    """A call on a socket bound to no address names its local end 0.0.0.0 (or ::): the
    route picks the source below the call, where the device's record has it. Such a row
    joins the one row that differs from it only by that end's concrete address (the same
    host, ports, other end, process and socket, conn_uuid: the same socket's datagrams);
    with none, or with several (which one is not known), it stays on its own."""
    for key in [k for k in rows if k[1] in WILDCARDS or k[3] in WILDCARDS]:
        host, src, sport, dst, dport, comm, conn = key
        side = 1 if src in WILDCARDS else 3
        matches = [
            k for k in rows
            if k is not key and k[side] not in WILDCARDS and k[side] is not None
            and all(k[i] == key[i] for i in range(7) if i != side)
        ]  # fmt: skip
        if len(matches) != 1:
            continue
        into, row = rows[matches[0]], rows.pop(key)
        for view, (count, size) in row["views"].items():
            merged = into["views"].setdefault(view, [0, 0])
            merged[0] += count
            merged[1] += size
        for name in ("errors", "icmp_errors"):
            into[name] += row[name]
        into["first"] = min(into["first"], row["first"])
        into["last"] = max(into["last"], row["last"])

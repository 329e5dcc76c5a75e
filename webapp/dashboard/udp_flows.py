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

A row's errors are its failed calls and its datagrams the receiving socket could not queue
(receive buffer full, issue 34 item 5): the skb provider's SOCKET_RCVBUFF drops of the
row's 4-tuple (source first, as the row), or, for a receiving socket with no such drop
recorded (skb off), its udp-fail-queue socket events, which name the socket but not the
sender: those go to the socket's one row, and stay in the socket-events table alone when
it has several. Never both: the kernel reports one datagram to both. A drop goes to the
receiving socket's row (conn_uuid) of its destination, from its source or from an unknown one
(a recv() that asked for no address), else to the newest row of its 4-tuple.
Keep in sync with: translators/udp.py (which records carry what), js/udp.js.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from django.db.models import Count, Max, Min, Q, QuerySet, Sum

from translators.udp import CALL_HOOKS
from webapp.dashboard.tables import SkbDrop, SockEvent

RCVBUF_REASON = "SOCKET_RCVBUFF"
FAIL_QUEUE = "udp-fail-queue"


def flow_filter(addr: str | None, port: str | None) -> Q:
    """The UDP page's filter: ``addr`` (an IPv4 or IPv6 address, any written form) and
    ``port`` at either end of a record; ValueError says what is wrong with a value."""
    q = Q()
    if addr:
        try:
            text = str(ipaddress.ip_address(addr.strip().strip("[]")))
        except ValueError:
            raise ValueError(f"addr {addr!r} is not an IP address") from None
        q &= Q(src=text) | Q(dst=text)
    if port:
        if not port.strip().isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"port {port!r} is not a port number (1-65535)")
        q &= Q(sport=int(port)) | Q(dport=int(port))
    return q


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
    out = out[:limit]
    receive_buffer_drops(out)
    return out


def receive_buffer_drops(rows: list[dict[str, Any]]) -> None:
    """Add each row's datagrams refused by a full receive buffer to ``errors`` (and to
    ``rcvbuf_drops``): two grouped queries, over the rows' ports (skb_drop's (sport, dport)
    index) and their sockets (sock_event's conn_uuid index)."""
    for row in rows:
        row["rcvbuf_drops"] = 0
    if not rows:
        return
    hosts = sorted({r["host_id"] for r in rows})
    by_tuple: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    by_socket: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        by_tuple.setdefault((row["host_id"], row["src"], row["sport"], row["dst"], row["dport"]), []).append(row)
        if row["conn_uuid"]:
            by_socket.setdefault((row["host_id"], row["conn_uuid"]), []).append(row)
    drops = (
        SkbDrop.objects.filter(
            drop_reason_str=RCVBUF_REASON,
            host_id__in=hosts,
            sport__in=sorted({r["sport"] for r in rows if r["sport"] is not None}),
            dport__in=sorted({r["dport"] for r in rows if r["dport"] is not None}),
        )
        .values("host_id", "src", "sport", "dst", "dport", "conn_uuid")
        .annotate(n=Count("id"))
        .order_by()
    )
    counted: set[tuple[str, str]] = set()  # receiving sockets whose drops the skb provider recorded
    for d in drops:
        if d["conn_uuid"]:
            counted.add((d["host_id"], d["conn_uuid"]))
        # the receiving socket's row of this flow: its source as the drop's, or unknown (a
        # recv() that asked for no address); else any row of the 4-tuple (newest first)
        own = [
            r
            for r in by_socket.get((d["host_id"], d["conn_uuid"]), ())
            if r["dst"] == d["dst"] and r["dport"] == d["dport"] and r["sport"] in (d["sport"], None)
        ]
        own.sort(key=lambda r: r["sport"] is None)  # the exact source first
        candidates = own or by_tuple.get((d["host_id"], d["src"], d["sport"], d["dst"], d["dport"]), [])
        if candidates:
            candidates[0]["rcvbuf_drops"] += d["n"]
    fails = (
        SockEvent.objects.filter(probe=FAIL_QUEUE, host_id__in=hosts, conn_uuid__in=sorted({k[1] for k in by_socket}))
        .values("host_id", "conn_uuid", "sport")
        .annotate(n=Count("id"))
        .order_by()
    )
    for f in fails:
        key = (f["host_id"], f["conn_uuid"])
        if key in counted or key not in by_socket:
            continue
        # the socket's rows where it received: its own port (the event's, local) is the destination
        receiving = [r for r in by_socket[key] if r["dport"] == f["sport"]]
        if len(receiving) == 1:
            receiving[0]["rcvbuf_drops"] += f["n"]
    for row in rows:
        row["errors"] += row["rcvbuf_drops"]


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

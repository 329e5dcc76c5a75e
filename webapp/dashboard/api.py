"""The dashboard's JSON views under /api/dash/: what the page scripts fetch.

Login is required (webapp.middleware answers anonymous API calls with a JSON 401; the
decorator below checks again so the views stay safe if mounted elsewhere). Every error
is ``{"error": "..."}`` through webapp.http.json_error. The read API (webapp/api) serves
programs; these views serve exactly what one page draws, in one request.
Keep in sync with: js/*.js (field names), queries.py, detail.py, buffers.py, counters.py.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from django.db.models import Count, Max, Sum
from django.http import HttpRequest, HttpResponse, JsonResponse

from webapp.bus import health as bus_health
from webapp.dashboard import (
    alert_versions,
    buffers,
    captures,
    conn_drops,
    counters,
    detail,
    empty_panels,
    listen_rows,
    overview_counts,
    overview_findings,
    own_traffic,
    page_losses,
    queries,
    selfhealth,
    stitch_match,
    time_wait,
    udp_flows,
)
from webapp.dashboard import (
    top_bytes as top_bytes_of,
)
from webapp.dashboard.filterlang import INT64_MAX, FilterError
from webapp.dashboard.models import AlertAck
from webapp.dashboard.tables import Alert, LossReport, SockEvent, UdpDatagram
from webapp.http import json_error
from webapp.traces import owner, recency
from webapp.traces.models import KIND_MODELS, Connection, Host
from webapp.traces.tokens import CAPTURE_PREFIX

View = Callable[..., HttpResponse]
RATE_WINDOW_S = 10  # overview rates: records in the last 10 seconds / 10
TOP_N = 10
ALERT_LIMIT = 500
UDP_LIMIT = 500


def api(*methods: str) -> Callable[[View], View]:
    """JSON view: allowed methods, login required (JSON 401), bad filters as JSON 400."""

    def wrap(view: View) -> View:
        @functools.wraps(view)
        def inner(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return json_error(401, "login required")
            if request.method not in methods:
                return json_error(405, f"method {request.method} not allowed; use {', '.join(methods)}")
            for name, value in kwargs.items():  # <int:...> path parts: the columns are signed 64-bit
                if isinstance(value, int) and not 0 <= value <= INT64_MAX:
                    return json_error(400, f"{name} is out of range (at most {INT64_MAX})")
            try:
                return view(request, *args, **kwargs)
            except FilterError as exc:
                return json_error(400, str(exc), pos=exc.pos)

        return inner

    return wrap


def host_names() -> list[str]:
    """Hosts that may send records: ingest only accepts records of a token's host."""
    return sorted(Host.objects.values_list("name", flat=True))


# --- connections -------------------------------------------------------------------------


def _limit(request: HttpRequest) -> int:
    raw = request.GET.get("limit") or str(queries.DEFAULT_LIMIT)
    if not raw.isdigit() or int(raw) not in queries.PAGE_SIZES:
        raise FilterError(f"limit must be one of {', '.join(map(str, queries.PAGE_SIZES))}", 0)
    return int(raw)


def _peer(both: stitch_match.Folded, c: Connection) -> dict[str, str] | None:
    """The other end of a row shown for both ends: its host, uuid and connection page."""
    other = both.peers.get(c.pk)
    if other is None:
        return None
    return {"host_id": other.host_id, "conn_uuid": other.conn_uuid, "url": stitch_match.link(other)}


@api("GET")
def connections(request: HttpRequest) -> HttpResponse:
    """One page of connections: ?q=<filter>&sort=<key|-key>&cursor=<c>&limit=<n>&uuids=<a,b>&own=1.

    nettrail's own connections (own_traffic.py) are left out unless ``own=1``. Both ends of
    one connection on the page are one row (stitch_match.fold); a host filter keeps only that
    host's rows, so it shows that host's end.
    """
    started = time.perf_counter()
    qs = queries.filtered(request.GET.get("q", ""))
    if request.GET.get("own") != "1":
        qs = qs.exclude(own_traffic.own_q())
    limit = _limit(request)
    uuids = [u for u in request.GET.get("uuids", "").split(",") if u][: queries.MAX_UUIDS]
    if uuids:  # the live table asks which of these new connections match its filter
        rows = list(qs.filter(conn_uuid__in=uuids).order_by("-first_seen"))
        page = queries.Page(rows, None, len(rows))
    else:
        page = queries.page(qs, request.GET.get("sort") or queries.DEFAULT_SORT, request.GET.get("cursor"), limit)
    # A connection traced at both ends (two hosts, or one over loopback) is shown once:
    # the opener's row, naming the other end. Matched among this page's rows only.
    both = stitch_match.fold(page.rows)
    rules = queries.alert_rules([c for c in both.rows if c.alerts])
    hints = queries.empty_result_hints(request.GET.get("q", "")) if page.total == 0 and not uuids else []
    # rows without a kernel state (uploaded captures) show their summary's Zeek conn_state
    zeek = captures.zeek_states([c for c in both.rows if c.state is None])
    listen = listen_rows.queues(both.rows)  # a LISTEN row's accept queue and backlog (ss -ltn)
    return JsonResponse(
        {
            "rows": [
                {
                    **queries.row_json(c, rules),
                    **zeek.get((c.host_id, c.conn_uuid), {}),
                    "peer": _peer(both, c),
                    "listen_queue": listen.get((c.host_id, c.conn_uuid)),
                }
                for c in both.rows
            ],
            "next": page.next,
            "total": page.total,  # rows matching the filter, before folding
            "folded": both.folded,  # rows of this page shown as their other end's "both ends"
            "hints": hints,
            "hosts": host_names(),
            # the page's note, read on its loads (not on the live table's new-uuid checks)
            "losses": None if uuids else page_losses.for_page("connections", None),
            "elapsed_ms": round((time.perf_counter() - started) * 1000, 1),
        }
    )


@api("GET")
def connection(request: HttpRequest, uuid: str) -> HttpResponse:
    """?host= names the connection's host (needed only when two hosts have the uuid)."""
    row = owner.connection_or_error(uuid, request.GET.get("host") or None)
    if not isinstance(row, Connection):
        return row
    conn = queries.annotated().filter(pk=row.pk).first()
    if conn is None:
        return json_error(404, f"no connection {uuid}")
    host = conn.host_id
    rules = queries.alert_rules([conn])
    body = queries.row_json(conn, rules)
    body["listen_queue"] = listen_rows.queues([conn]).get((host, uuid))
    summary = detail.summary_fields(host, uuid)
    retransmitted = detail.retransmitted(host, uuid)
    return JsonResponse(
        {
            "conn": {**summary, **body, **retransmitted},
            "timeline": detail.timeline(conn),
            "marks": detail.marks(host, uuid),
            "siftr": detail.siftr(host, uuid),
            "sampling": selfhealth.connection_sampling(host, uuid),
            "tseq": detail.tseq(conn),
            "tcpdebug": detail.tcpdebug(host, uuid),
            "skbs": detail.skbs(host, uuid),
            "skb_sampling": selfhealth.lifecycle_sampling(host),
            "drops": conn_drops.drops(conn),
            "alerts": detail.alerts(host, uuid),
            "empty_why": empty_panels.connection_panels(host),  # shown under a panel with no rows
            "losses": page_losses.for_page("connections", host, (conn.first_seen, conn.last_seen)),
        }
    )


# --- overview ------------------------------------------------------------------------------


def _host_counters(host: str, now: float, records: int, open_count: int) -> dict[str, Any]:
    """records, open_count: overview_counts' numbers for the host (every host in one query each)."""
    since = now - RATE_WINDOW_S
    recent = {"host_id": host, "ts_wall__gte": since}
    opened = Connection.objects.filter(host_id=host, last_seen__gte=since, first_seen__gte=since)
    new = recency.at_least(opened, since).count()
    # segments, the kernel's unit (TcpRetransSegs adds tcp_skb_pcount per retransmission):
    # one record stands for a whole GSO skb; a record without segs is one segment
    retrans = detail.retransmitted_segments(KIND_MODELS["tcp_retransmit"].objects.filter(**recent))
    reasons = buffers.drop_rates(host, since)
    lost = LossReport.objects.filter(host_id=host).aggregate(n=Sum("lost"))["n"] or 0
    last = Host.objects.filter(name=host).values_list("last_seen", flat=True).first()
    return {
        "host_id": host,
        "open": open_count,
        "new_per_s": new / RATE_WINDOW_S,
        "retrans_segs_per_s": retrans / RATE_WINDOW_S,
        "drops_per_s": sum(reasons.values()) / RATE_WINDOW_S,
        "top_drop_reasons": [
            {"reason": r, "per_s": n / RATE_WINDOW_S} for r, n in sorted(reasons.items(), key=lambda x: -x[1])[:3]
        ],
        "records_per_s": records / RATE_WINDOW_S,
        "lost": lost,
        "last_seen": last.timestamp() if last else None,
    }


@api("GET")
def overview(request: HttpRequest) -> HttpResponse:
    now = time.time()
    # The live overview: uploaded captures (host capture:NAME) are not live hosts, and their
    # connections never count as open or as talkers here (their page is /captures/).
    live = [h for h in host_names() if not captures.is_capture(h)]
    records = overview_counts.records_since(live, now - RATE_WINDOW_S)
    opened = overview_counts.open_connections(live)
    hosts = [_host_counters(h, now, records[h], opened[h]) for h in live]
    alert_cols = ("id", "start", "severity", "status", "rule_id", "host_id", "message", "conn_uuid", "members")
    # nettrail's own traffic (the browser viewing this page) raises no alert here (own_traffic.py)
    shown = Alert.objects.exclude(own_traffic.own_alert_q()).exclude(host_id__startswith=CAPTURE_PREFIX)
    # open findings by severity, then recency (issue 34 item 1; overview_findings.py)
    latest = list(overview_findings.ranked(alert_versions.latest(shown)).values(*alert_cols)[:TOP_N])
    conns = queries.annotated().exclude(host_id__startswith=CAPTURE_PREFIX)
    # by an index on both databases (top_bytes.py); ties (equal bytes) go newest first,
    # so the top ten does not hang on the index's order
    top_bytes = top_bytes_of.ordered(conns)[:TOP_N]
    top_retrans = conns.filter(retransmits__gt=0).order_by("-retransmits")[:TOP_N]
    return JsonResponse(
        {
            "window": RATE_WINDOW_S,
            "hosts": hosts,
            "alerts": latest,
            "top_bytes": [queries.row_json(c, {}) for c in top_bytes],
            "top_retrans": [queries.row_json(c, {}) for c in top_retrans],
            # the TIME_WAIT pile-up story: sockets per host and destination, each with its filter
            "time_wait": time_wait.by_destination([h["host_id"] for h in hosts]),
        }
    )


# --- buffers, udp ---------------------------------------------------------------------------


@api("GET")
def buffers_view(request: HttpRequest) -> HttpResponse:
    """?host=&reason=&conn=&unix=1: drop statistics and the selected buffers' lifecycles."""
    host = request.GET.get("host") or None
    reason = request.GET.get("reason") or None
    conn = request.GET.get("conn") or None
    unix = request.GET.get("unix") == "1"  # unix-socket drops: left out unless asked for
    # why the drops chart may be empty, per live host (empty_panels.py)
    live = [host] if host else [h for h in selfhealth.hosts_with_status() if not captures.is_capture(h)]
    return JsonResponse(
        {
            **buffers.summary(host, reason, conn, unix),
            "empty_why": empty_panels.hosts_panel(live, "drops"),
            "sampling": selfhealth.lifecycle_sampling(host),
            "losses": page_losses.for_page("buffers", host),
        }
    )


@api("GET")
def skb(request: HttpRequest, uid: int) -> HttpResponse:
    found = detail.lifecycles([uid], request.GET.get("host") or None)
    if not found:
        return json_error(404, "no such buffer")
    life = found[0]
    conn = (
        Connection.objects.filter(host_id=life["host_id"], conn_uuid=life["conn_uuid"]).first()
        if life["conn_uuid"]
        else None
    )
    sampling = selfhealth.lifecycle_sampling(life["host_id"])
    return JsonResponse({"skb": life, "conn": queries.row_json(conn, {}) if conn else None, "sampling": sampling})


@api("GET")
def udp(request: HttpRequest) -> HttpResponse:
    """UDP flows: datagrams grouped by host, 4-tuple and process; socket errors beside them.
    ?addr=A&port=P: only datagrams with A (P) at either end, and socket events whose socket
    has it (udp_flows.flow_filter; indexed per column, webapp/traces/schema.py)."""
    host = request.GET.get("host") or None
    try:
        ends = udp_flows.flow_filter(request.GET.get("addr") or None, request.GET.get("port") or None)
    except ValueError as exc:
        return json_error(400, str(exc))
    qs = UdpDatagram.objects.filter(ends)
    if host:
        qs = qs.filter(host_id=host)
    socks = SockEvent.objects.filter(ends, proto="udp")
    if host:
        socks = socks.filter(host_id=host)
    sock_rows = (
        socks.values("host_id", "probe", "src", "sport", "comm")
        .annotate(events=Count("id"), last=Max("ts_wall"))
        .order_by("-last")[:UDP_LIMIT]
    )
    return JsonResponse(
        {
            "flows": udp_flows.flows(qs, UDP_LIMIT),
            "socket_events": list(sock_rows),
            "hosts": host_names(),
            "provider_off": selfhealth.provider_off(("udp", "udp-calls"), host),
            "degraded": selfhealth.provider_degraded(("udp", "udp-calls"), host),
            "losses": page_losses.for_page("udp", host),
        }
    )


# --- counters: per-flow IP counters, stack counters ------------------------------------------


@api("GET")
def ip_flows(request: HttpRequest) -> HttpResponse:
    """?host=&sort=bytes|packets|first|last (- descends): one row per flow, exact totals."""
    sort = request.GET.get("sort") or counters.DEFAULT_FLOW_SORT
    host = request.GET.get("host") or None
    try:
        body = counters.ip_flows(host, sort)
    except counters.SortError as exc:
        return json_error(400, str(exc))
    # why the table may be empty, per live host (empty_panels.py): ip-flows is off by default
    live = [host] if host else [h for h in selfhealth.hosts_with_status() if not captures.is_capture(h)]
    return JsonResponse(
        {
            **body,
            "hosts": host_names(),
            "empty_why": empty_panels.hosts_panel(live, "ip_flows"),
            "losses": page_losses.for_page("counters", host),
        }
    )


@api("GET")
def stack_counters(request: HttpRequest) -> HttpResponse:
    """?host=&netns=: stack counter deltas over time, per namespace and summed."""
    netns = request.GET.get("netns") or None
    if netns is not None and not netns.isdigit():
        return json_error(400, f"netns must be a network namespace inode (a number); got {netns!r}")
    body = counters.stack_counters(request.GET.get("host") or None, int(netns) if netns else None)
    return JsonResponse({**body, "hosts": host_names()})


# --- alerts -----------------------------------------------------------------------------------


def _ack_of(a: Any) -> AlertAck | None:
    return alert_versions.ack_of(a)


def _alert_json(
    a: Any,
    history: dict[alert_versions.AlertKey, dict[str, Any]] | None = None,
    unfollowed: dict[int, tuple[str, float]] | None = None,
    acks: dict[int, AlertAck | None] | None = None,
) -> dict[str, Any]:
    ack = acks[a.pk] if acks is not None else _ack_of(a)
    key = alert_versions.key_of(a)
    past = (history or {}).get(key) if key else None
    # open, but its collector stopped or restarted since its last version: nothing follows it now
    unfollowed_because, unfollowed_since = (unfollowed or {}).get(a.pk, (None, None))
    return {
        "id": a.pk,
        "host_id": a.host_id,
        "rule_id": a.rule_id,
        "severity": a.severity,
        "status": a.status,
        "start": a.start,
        "end": a.end,
        "count": a.count,
        "message": a.message,
        "conn_uuid": a.conn_uuid,
        "src": a.src,
        "sport": a.sport,
        "dst": a.dst,
        "dport": a.dport,
        "evidence": a.evidence,
        "metric": a.metric,
        "thresholds": a.thresholds,
        # a grouped finding's sockets (issue 34 item 1): the count, and the first ids to link
        "members": a.members,
        "member_conn_uuids": a.member_conn_uuids,
        "acked_by": (ack.user.get_username() if ack.user else "(deleted user)") if ack else None,
        "acked_at": ack.at.timestamp() if ack else None,
        # the first and worst versions' numbers (alert_versions.history); None: one version known
        "first": past["first"] if past else None,
        "worst": past["worst"] if past else None,
        "versions": past["versions"] if past else 1,
        "unfollowed_since": unfollowed_since,
        "unfollowed_because": unfollowed_because,  # "stopped" or "restarted"
    }


@api("GET")
def alerts(request: HttpRequest) -> HttpResponse:
    """?severity=&rule=&host=&acked=yes|no&own=1: the newest matching alerts; alerts about
    nettrail's own traffic (own_traffic.py) only with ``own=1``."""
    qs = alert_versions.latest(Alert.objects.select_related("ack", "ack__user")).order_by("-start", "-id")
    if request.GET.get("own") != "1":
        qs = qs.exclude(own_traffic.own_alert_q())
    for param, column in (("severity", "severity"), ("rule", "rule_id"), ("host", "host_id"), ("status", "status")):
        value = request.GET.get(param)
        if value:
            qs = qs.filter(**{column: value})
    acked = request.GET.get("acked")
    if acked in ("yes", "no"):
        qs = qs.filter(alert_versions.acked()) if acked == "yes" else qs.exclude(alert_versions.acked())
    elif acked:
        return json_error(400, "acked is yes or no")
    facets = {
        "rules": sorted(set(Alert.objects.values_list("rule_id", flat=True).distinct())),
        "hosts": sorted(set(Alert.objects.values_list("host_id", flat=True).distinct())),
    }
    rows = list(qs[:ALERT_LIMIT])
    history = alert_versions.history(k for k in map(alert_versions.key_of, rows) if k)
    unfollowed = alert_versions.unfollowed(rows)
    acks = alert_versions.acks_of(rows)  # one query for the page's acknowledgements, not one per row
    return JsonResponse({"alerts": [_alert_json(a, history, unfollowed, acks) for a in rows], **facets})


@api("POST")
def alert_ack(request: HttpRequest, alert_id: int) -> HttpResponse:
    alert = Alert.objects.filter(pk=alert_id).first()
    if alert is None:
        return json_error(404, "no such alert")
    AlertAck.objects.get_or_create(alert=alert, defaults={"user": request.user})
    alert = Alert.objects.select_related("ack", "ack__user").get(pk=alert_id)
    key = alert_versions.key_of(alert)
    return JsonResponse(_alert_json(alert, alert_versions.history([key] if key else [])))


@api("GET")
def alert_evidence(request: HttpRequest, alert_id: int) -> HttpResponse:
    """The records an alert names as evidence (by seq on the alert's host and boot)."""
    alert = Alert.objects.filter(pk=alert_id).first()
    if alert is None:
        return json_error(404, "no such alert")
    seqs = [s for s in (alert.evidence or []) if isinstance(s, int)][:ALERT_LIMIT]
    found: list[dict[str, Any]] = []
    for kind, model in KIND_MODELS.items():
        rows = model.objects.filter(host_id=alert.host_id, boot_id=alert.boot_id, seq__in=seqs)
        for row in rows.values("seq", "ts_wall", "probe", "conn_uuid", "skb_uid"):
            found.append({"kind": kind, **row})
    found.sort(key=lambda r: r["seq"])
    return JsonResponse({"alert": alert_id, "evidence": seqs, "records": found})


# --- status: tracer self-health -----------------------------------------------------------------


@api("GET")
def status(request: HttpRequest) -> HttpResponse:
    """?host=: each collector's attach coverage, sampling, CPU and events/s, self-health alerts."""
    # bus: the scale-out ingest stream's health (webapp/bus/health.py), None on the appliance.
    return JsonResponse(
        {**selfhealth.status(request.GET.get("host") or None), "all_hosts": host_names(), "bus": bus_health.as_json()}
    )

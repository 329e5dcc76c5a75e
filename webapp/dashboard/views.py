"""Dashboard pages: each renders one template with the little data its script starts from.

Everything else a page shows is fetched by its script from /api/dash/ (api.py) and kept
live over /ws/live/. Keep in sync with: templates/dashboard/*.html, static/dashboard/js/.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast
from urllib.parse import quote

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse

from analysis.export.pcap import PACKET_KINDS as PCAP_KINDS
from translators.records import SEVERITIES
from webapp.dashboard import captures, queries, stitched
from webapp.dashboard.api import host_names
from webapp.dashboard.counters import DEFAULT_FLOW_SORT
from webapp.dashboard.filterlang import FIELDS
from webapp.dashboard.findings import findings_of
from webapp.dashboard.tables import SiftrSample
from webapp.traces import owner
from webapp.traces.models import KIND_MODELS

View = Callable[..., HttpResponse]


def page(view: View) -> View:
    """A dashboard page: anonymous users are redirected to the login page."""
    return cast(View, login_required(view))


# (sort key, heading, numeric) of the connections table; keys are queries.SORTS keys.
CONNECTION_COLUMNS = (
    ("host", "Host", False),
    ("proto", "Proto", False),
    ("comm", "Process", False),
    ("pid", "PID", True),
    ("uid", "UID", True),
    ("local", "Local", False),
    ("remote", "Remote", False),
    ("state", "State", False),
    ("start", "Opened", False),
    ("last", "Last seen", False),
    ("duration", "Duration", True),
    ("bytes", "Bytes", True),
    ("retrans", "Retrans", True),
    ("alerts", "Anomaly", False),
)
# The connection's downloads, all served by webapp/reports (the one exporter: the same
# documents as `nettrail report` and /api/report); shown only when that app is installed.
EXPORTS = (
    ("json", "JSON"),
    ("xml", "XML"),
    ("text", "Text"),
    ("html", "HTML"),
    ("pcap", "pcap"),
    ("siftr", "SIFTR log"),
    ("zeek", "Zeek conn.log"),
)


def _page(request: HttpRequest, template: str, page_data: dict[str, Any], **context: Any) -> HttpResponse:
    context.update(page_data=page_data, logout_url=reverse("logout"))
    return render(request, f"dashboard/{template}", context)


@page
def overview(request: HttpRequest) -> HttpResponse:
    from webapp.dashboard.api import RATE_WINDOW_S

    return _page(request, "overview.html", {"hosts": host_names(), "window": RATE_WINDOW_S})


@page
def connections(request: HttpRequest) -> HttpResponse:
    data = {"q": request.GET.get("q", ""), "limit": queries.DEFAULT_LIMIT, "hosts": host_names()}
    data["default_sort"] = queries.DEFAULT_SORT
    columns = [{"key": k, "label": label, "num": num} for k, label, num in CONNECTION_COLUMNS]
    return _page(request, "connections.html", data, fields=FIELDS, columns=columns, page_sizes=queries.PAGE_SIZES)


def _unavailable(uuid: str, host: str) -> dict[str, str]:
    """Why a download cannot be made for this connection, by format: the page shows the
    button disabled with the reason instead of saving a file that holds an error (the
    report endpoint answers 409 for them). Same conditions as webapp/reports/exports.py."""
    mine = {"host_id": host, "conn_uuid": uuid}
    why: dict[str, str] = {}
    if not any(KIND_MODELS[k].objects.filter(**mine, frame_bytes__isnull=False).exists() for k in PCAP_KINDS):
        why["pcap"] = (
            "No packets to download: a live connection is traced in the kernel, which records no packet bytes; "
            "packets exist for uploaded captures (Captures page) and `nettrail analyze FILE --store --keep-bytes`."
        )
    samples = SiftrSample.objects.filter(**mine)
    if not samples.exclude(direction="poll").exists():
        why["siftr"] = (
            "No SIFTR log: this connection's SIFTR samples were polled (siftr-poll, one per interval with no packet "
            "behind it), and each line of a SIFTR log is a packet; the per-packet siftr provider writes them."
            if samples.exists()
            else "No SIFTR samples for this connection: neither the siftr nor the siftr-poll provider was running."
        )
    return why


def _exports(uuid: str, host: str) -> list[dict[str, str]]:
    try:
        base = reverse("connection-export", args=[uuid])
    except NoReverseMatch:
        return []
    on_host = f"&host={quote(host)}"  # a connection is its host's: exports name it
    why = _unavailable(uuid, host)
    return [
        {"format": f, "label": label, "url": f"{base}?format={f}{on_host}", "unavailable": why.get(f, "")}
        for f, label in EXPORTS
    ]


@page
def connection(request: HttpRequest, uuid: str) -> HttpResponse:
    try:
        conn = owner.connection_of(uuid, request.GET.get("host") or None)
    except owner.Ambiguous as exc:
        raise Http404(str(exc)) from exc
    if conn is None:
        raise Http404("no such connection")
    data = {"conn_uuid": uuid, "host": conn.host_id}
    both = stitched.stitched(conn)  # the other end's half, when it was traced too
    found = findings_of(conn.host_id, uuid)  # captured connections: what went wrong, worst first
    return _page(request, "connection.html", data, exports=_exports(uuid, conn.host_id), stitched=both, findings=found)


@page
def buffers(request: HttpRequest) -> HttpResponse:
    data = {k: request.GET.get(k, "") for k in ("host", "reason", "conn", "skb")}
    return _page(request, "buffers.html", {**data, "hosts": host_names()})


@page
def udp(request: HttpRequest) -> HttpResponse:
    return _page(request, "udp.html", {"hosts": host_names(), "host": request.GET.get("host", "")})


@page
def counters(request: HttpRequest) -> HttpResponse:
    data = {"hosts": host_names(), "host": request.GET.get("host", ""), "sort": request.GET.get("sort", "")}
    return _page(request, "counters.html", {**data, "default_sort": DEFAULT_FLOW_SORT})


@page
def alerts(request: HttpRequest) -> HttpResponse:
    data = {k: request.GET.get(k, "") for k in ("severity", "rule", "host", "acked", "own")}
    return _page(request, "alerts.html", {**data, "hosts": host_names()}, severities=SEVERITIES)


@page
def status(request: HttpRequest) -> HttpResponse:
    data = {"hosts": host_names(), "host": request.GET.get("host", ""), "tracing_url": reverse("dashboard:tracing")}
    return _page(request, "status.html", data)


def captures_context(request: HttpRequest) -> dict[str, Any]:
    """The Captures page's context (also the upload view's, webapp/api/upload.py): the
    upload form, the uploaded captures and, with ?host=capture:NAME, that capture's result."""
    from webapp.api.upload import max_bytes

    host = request.GET.get("host", "")
    result = captures.capture(host) if host and captures.is_capture(host) else None
    stored = request.GET.get("stored", "")
    context: dict[str, Any] = {
        "max_mib": max_bytes() // (1024 * 1024),
        "uploaded": captures.uploaded(),
        "result": result,
        "stored": int(stored) if result and stored.isdigit() else None,
        "duplicates": request.GET.get("duplicates", "0"),
        "page_data": {"host": host},
        "logout_url": reverse("logout"),
    }
    return context


@page
def captures_page(request: HttpRequest) -> HttpResponse:
    host = request.GET.get("host", "")
    context = captures_context(request)
    if host and context["result"] is None:
        raise Http404(f"no uploaded capture {host!r}")
    return render(request, "dashboard/captures.html", context)

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

from translators.records import SEVERITIES
from webapp.dashboard import queries
from webapp.dashboard.api import host_names
from webapp.dashboard.counters import DEFAULT_FLOW_SORT
from webapp.dashboard.filterlang import FIELDS
from webapp.traces import owner

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


def _exports(uuid: str, host: str) -> list[dict[str, str]]:
    try:
        base = reverse("connection-export", args=[uuid])
    except NoReverseMatch:
        return []
    on_host = f"&host={quote(host)}"  # a connection is its host's: exports name it
    return [{"format": f, "label": label, "url": f"{base}?format={f}{on_host}"} for f, label in EXPORTS]


@page
def connection(request: HttpRequest, uuid: str) -> HttpResponse:
    try:
        conn = owner.connection_of(uuid, request.GET.get("host") or None)
    except owner.Ambiguous as exc:
        raise Http404(str(exc)) from exc
    if conn is None:
        raise Http404("no such connection")
    data = {"conn_uuid": uuid, "host": conn.host_id}
    return _page(request, "connection.html", data, exports=_exports(uuid, conn.host_id))


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
    data = {k: request.GET.get(k, "") for k in ("severity", "rule", "host", "acked")}
    return _page(request, "alerts.html", {**data, "hosts": host_names()}, severities=SEVERITIES)


@page
def status(request: HttpRequest) -> HttpResponse:
    return _page(request, "status.html", {"hosts": host_names(), "host": request.GET.get("host", "")})

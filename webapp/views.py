"""The minimal home page: nettrail is running, and which hosts report to it.

The dashboard (webapp/dashboard) replaces it at `/` when that app provides an index.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from webapp.traces.models import Host


def home(request: HttpRequest) -> HttpResponse:
    return render(request, "webapp/home.html", {"hosts": Host.objects.all()})

"""/status/tracing/?host=NAME: what a host's collector traces, chosen from the dashboard.

Staff only (an ordinary login may look, never change kernel tracing); the request is
stored on the Host (webapp/traces/tracing.py) and reaches that host's collector with
its next ingest answer, which `nettrail collect --providers-from-server` follows
(`nettrail up`'s collector does). Other collectors keep their command line's set and
the Status page shows what each one runs.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import urlencode

from translators.tracing_request import MAX_SKB_SAMPLE, PROVIDER_NAMES, TracingRequest, short_window
from webapp.dashboard.selfhealth import newest_status
from webapp.traces import tracing
from webapp.traces.models import Host

# What each provider adds, for the form (docs/collector.md; costs: docs/benchmarks.md).
PROVIDER_NOTES = {
    "tcp": "TCP states, retransmissions, resets, congestion-state changes",
    "skb": "drops with their reasons (always-on mode)",
    "siftr": "per-flow samples at packets: cwnd, srtt, windows (rules K1, K6, K7, K13; the time-sequence graph; "
    "SIFTR logs; costly: a program on every packet)",
    "siftr-poll": "per-flow samples polled every 0.1 s: cwnd, srtt, windows (rules K1, K6, K7, K13; the time-sequence "
    "graph; always-on mode)",
    "ip-flows": "exact per-flow IP counters",
    "udp": "UDP datagrams at the device and at each call, with exact per-flow counts (costly: a program on every packet)",
    "udp-calls": "UDP datagrams at each send and receive call, with their peers (the UDP page; always-on mode)",
    "skb-lifecycle": "buffer lifecycles, one buffer in N followed, in windows or all the time (Buffers page)",
    "tcpdebug": "TCP debug records, every segment (costly)",
    "ip": "a record per IP packet (costly)",
}
# Measured sets (docs/benchmarks.md, "SIFTR by polling"): CPU per byte of bulk loopback
# TCP against untraced.
PRESETS = (
    (
        "tcp,siftr-poll,skb,udp-calls,skb-lifecycle, one buffer in 64, windows 0.2/2",
        "nettrail up's default, no program on a packet's path: about 1.02 of untraced CPU per byte, within the 3% "
        "always-on budget",
    ),
    ("tcp,siftr-poll,skb,udp-calls", "the same without buffer lifecycles: about 1.01"),
    (
        "tcp,siftr,skb,ip-flows,udp,skb-lifecycle, one buffer in 64, windows 0.2/2",
        "a program on every packet (SIFTR logs, per-flow IP counters, the device's UDP view): about 1.10",
    ),
)


class TracingForm(forms.Form):
    """The providers to ask for; the page's other button ("own") asks for nothing instead."""

    providers = forms.MultipleChoiceField(
        choices=[(p, f"{p}: {PROVIDER_NOTES[p]}") for p in PROVIDER_NAMES],
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": "Choose at least one provider, or the collector's own choice."},
    )
    skb_sample = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_SKB_SAMPLE,
        label="skb-lifecycle: follow one buffer in N (empty: the collector's own; 1: every buffer)",
    )  # fmt: skip

    skb_window = forms.CharField(
        required=False, max_length=32,
        label="skb-lifecycle: its hooks attached OPEN/EVERY seconds, e.g. 0.2/2 (empty: the collector's own; "
        "0: all the time, the full tracing)",
    )  # fmt: skip

    def clean_skb_window(self) -> str | None:
        value = str(self.cleaned_data.get("skb_window") or "").strip()
        if not value:
            return None
        try:
            return short_window(value)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def request(self) -> TracingRequest:
        data = self.cleaned_data
        providers = tuple(p for p in PROVIDER_NAMES if p in data["providers"])
        return TracingRequest(providers, data["skb_sample"], data["skb_window"])


def _initial(host: Host) -> dict[str, Any]:
    request = tracing.request_of(host)
    if request is None:
        return {"providers": [], "skb_sample": None, "skb_window": ""}
    return {"providers": list(request.providers), "skb_sample": request.skb_sample, "skb_window": request.skb_window}


@login_required
def tracing_page(request: HttpRequest) -> HttpResponse:
    host = get_object_or_404(Host, name=request.GET.get("host", ""))
    staff = bool(request.user.is_staff)
    if request.method == "POST":
        if not staff:
            return HttpResponse("Only staff may change what a host traces.", status=403, content_type="text/plain")
        form = TracingForm(request.POST)
        if "own" in request.POST or form.is_valid():
            asked = None if "own" in request.POST else form.request()
            tracing.set_request(host, asked, request.user.get_username())
            return redirect(reverse("dashboard:tracing") + "?" + urlencode({"host": host.name, "saved": 1}))
    elif request.method == "GET":
        form = TracingForm(initial=_initial(host))
    else:
        return HttpResponse("GET or POST", status=405, content_type="text/plain")
    running = newest_status(host.name, "providers", "skb_sample", "skb_window", "untraced_ns", "providers_from")
    context = {
        "host": host, "form": form, "staff": staff, "requested": tracing.request_of(host),
        "presets": PRESETS, "saved": request.GET.get("saved") == "1", "logout_url": reverse("logout"),
        "page_data": {"hosts": [], "host": host.name, "running": running},  # js/tracing.js shows it
    }  # fmt: skip
    return render(request, "dashboard/tracing.html", context)

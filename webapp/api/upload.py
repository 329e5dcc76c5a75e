"""`/captures/upload/`: a browser upload of a pcap/pcapng file, analysed and stored like
`analyze --store --keep-bytes`.

The file (at most NETTRAIL_UPLOAD_MAX_BYTES, default 64 MiB) is written to a
temporary file, run through the capture pipeline with the alert rules `nettrail analyze`
reports (analysis.capture.rule_records: packets with their bytes, summaries, P1-P6 and
the K rules; webapp.traces.capture_store) and stored under a host named ``capture:`` +
the uploaded file's name. A stored capture is answered with a redirect (303) to its
result page on the dashboard's Captures page (webapp/dashboard/captures.py); a refusal
with that page and the reason. The prefix is reserved
(webapp/traces/tokens.py refuses it), so an upload never writes into a live host --
not even one whose file is named like it (``vm``). The import is one transaction: a
file that fails halfway leaves nothing behind, not even its host row; live pushes go
out only after the commit. A packet (or any record) with an impossible time, before
2000 or over a day ahead of the server's clock, refuses the file with a 400 naming the
packet, the field and the time (webapp/traces/timestamps.py).
Login required (project middleware), CSRF-protected form.
Keep in sync with docs/api.md.
"""

from __future__ import annotations

import os
import tempfile

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_http_methods

from analysis.alerts.config import ConfigError, load_config
from analysis.capture.pcap import CaptureError
from analysis.capture.rule_records import analysed_records
from webapp.traces.capture_store import store_records
from webapp.traces.timestamps import ImpossibleTime
from webapp.traces.tokens import CAPTURE_PREFIX

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
MAX_NAME = 255
FORM_OVERHEAD = 64 * 1024  # multipart boundaries, headers and the CSRF field around the file
TEMPLATE = "dashboard/captures.html"


def max_bytes() -> int:
    return int(getattr(settings, "NETTRAIL_UPLOAD_MAX_BYTES", DEFAULT_MAX_BYTES))


def capture_name(upload: UploadedFile) -> str:
    """Host name of the import: the reserved prefix and the uploaded file's own name,
    without any directory part."""
    name = os.path.basename((upload.name or "").replace("\\", "/")).strip() or "upload.pcap"
    return (CAPTURE_PREFIX + name)[:MAX_NAME]


@require_http_methods(["GET", "POST"])
def upload(request: HttpRequest) -> HttpResponse:
    from webapp.dashboard.views import captures_context

    context = captures_context(request)
    if request.method == "GET":
        return render(request, TEMPLATE, context)
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if declared.isdigit() and int(declared) > max_bytes() + FORM_OVERHEAD:
        # Refused before Django reads the body: an oversized upload costs no disk.
        error = f"the upload is larger than the {max_bytes()} bytes a capture may have"
        return render(request, TEMPLATE, {**context, "error": error}, status=413)
    upload = request.FILES.get("capture")
    if upload is None:
        return render(request, TEMPLATE, {**context, "error": "choose a capture file"}, status=400)
    if upload.size is None or upload.size > max_bytes():
        error = f"{upload.name}: larger than the {max_bytes()} bytes an upload may have"
        return render(request, TEMPLATE, {**context, "error": error}, status=413)
    name = capture_name(upload)
    with tempfile.NamedTemporaryFile(prefix="nettrail-upload-", suffix=".cap") as tmp:
        for chunk in upload.chunks():
            tmp.write(chunk)
        tmp.flush()
        try:
            config = load_config()  # $NETTRAIL_RULES, as `nettrail analyze` reads it
            with transaction.atomic():  # all of the capture or nothing, host row included
                totals = store_records(analysed_records(tmp.name, name, config), name)
        except ConfigError as exc:
            return render(request, TEMPLATE, {**context, "error": f"the alert rules file: {exc}"}, status=500)
        except ImpossibleTime as exc:  # a packet before 2000 or over a day ahead: nothing stored
            error = f"{name.removeprefix(CAPTURE_PREFIX)}: {exc}; nothing was stored"
            return render(request, TEMPLATE, {**context, "error": error}, status=400)
        except (CaptureError, OSError, ValueError) as exc:
            shown = name.removeprefix(CAPTURE_PREFIX)
            error = f"{shown}: not a capture nettrail can read ({str(exc).replace(tmp.name, shown)})"
            return render(request, TEMPLATE, {**context, "error": error}, status=400)
    query = urlencode({"host": name, "stored": totals.stored, "duplicates": totals.duplicates})
    return HttpResponseRedirect(f"{reverse('dashboard:captures')}?{query}", status=303)

"""`/captures/upload/`: a browser upload of a pcap/pcapng file, analysed and stored like `analyze --store`.

The file (at most NETTRAIL_UPLOAD_MAX_BYTES, default 64 MiB) is written to a
temporary file, run through the capture pipeline (analysis.capture.file_records, webapp.traces.capture_store) and stored
under a host named ``capture:`` + the uploaded file's name. The prefix is reserved
(webapp/traces/tokens.py refuses it), so an upload never writes into a live host --
not even one whose file is named like it (``vm``). The import is one transaction: a
file that fails halfway leaves nothing behind, not even its host row; live pushes go
out only after the commit. Login required (project middleware), CSRF-protected form.
Keep in sync with docs/api.md.
"""

from __future__ import annotations

import os
import tempfile

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from analysis.capture.file_records import capture_records
from analysis.capture.pcap import CaptureError
from webapp.traces.capture_store import store_records
from webapp.traces.tokens import CAPTURE_PREFIX

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
MAX_NAME = 255
FORM_OVERHEAD = 64 * 1024  # multipart boundaries, headers and the CSRF field around the file
TEMPLATE = "api/upload.html"


def max_bytes() -> int:
    return int(getattr(settings, "NETTRAIL_UPLOAD_MAX_BYTES", DEFAULT_MAX_BYTES))


def capture_name(upload: UploadedFile) -> str:
    """Host name of the import: the reserved prefix and the uploaded file's own name,
    without any directory part."""
    name = os.path.basename((upload.name or "").replace("\\", "/")).strip() or "upload.pcap"
    return (CAPTURE_PREFIX + name)[:MAX_NAME]


@require_http_methods(["GET", "POST"])
def upload(request: HttpRequest) -> HttpResponse:
    context = {"max_mib": max_bytes() // (1024 * 1024)}
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
            with transaction.atomic():  # all of the capture or nothing, host row included
                totals = store_records(capture_records(tmp.name, name), name)
        except (CaptureError, OSError, ValueError) as exc:
            shown = name.removeprefix(CAPTURE_PREFIX)
            error = f"{shown}: not a capture nettrail can read ({str(exc).replace(tmp.name, shown)})"
            return render(request, TEMPLATE, {**context, "error": error}, status=400)
    result = {"host": name, "stored": totals.stored, "duplicates": totals.duplicates}
    return render(request, TEMPLATE, {**context, "result": result})

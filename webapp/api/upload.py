"""`/captures/upload/`: a browser upload of a pcap/pcapng file, analysed and stored like `analyze --store`.

The file (at most NETTRAIL_UPLOAD_MAX_BYTES, default 64 MiB) is written to a
temporary file, run through the capture pipeline (analysis.capture.file_records) and stored
under a host named after the uploaded file's name. Login required (project
middleware), CSRF-protected form. Keep in sync with docs/api.md.
"""

from __future__ import annotations

import os
import tempfile

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from analysis.capture.file_records import capture_records
from analysis.capture.pcap import CaptureError
from webapp.traces.capture_store import store_records

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
MAX_NAME = 255
FORM_OVERHEAD = 64 * 1024  # multipart boundaries, headers and the CSRF field around the file
TEMPLATE = "api/upload.html"


def max_bytes() -> int:
    return int(getattr(settings, "NETTRAIL_UPLOAD_MAX_BYTES", DEFAULT_MAX_BYTES))


def capture_name(upload: UploadedFile) -> str:
    """Host name of the import: the uploaded file's own name, without any directory part."""
    name = os.path.basename((upload.name or "").replace("\\", "/")).strip()
    return name[:MAX_NAME] or "upload.pcap"


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
            totals = store_records(capture_records(tmp.name, name), name)
        except CaptureError as exc:
            error = f"{name}: not a capture nettrail can read ({str(exc).replace(tmp.name, name)})"
            return render(request, TEMPLATE, {**context, "error": error}, status=400)
    result = {"host": name, "stored": totals.stored, "duplicates": totals.duplicates}
    return render(request, TEMPLATE, {**context, "result": result})

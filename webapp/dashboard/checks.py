"""Start-up check: the charting library scripts/js-env copies from npm is in place.

Without it every chart on the dashboard stays blank, so `manage.py check` (and every
management command, and the server start) says what to run instead of failing silently
in the browser. Keep in sync with: scripts/js-env (the vendor path), base templates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core import checks

VENDOR = Path(__file__).resolve().parent / "static" / "dashboard" / "vendor" / "uplot"
REQUIRED = ("uPlot.iife.min.js", "uPlot.min.css")


def uplot_installed(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    missing = [name for name in REQUIRED if not (VENDOR / name).is_file()]
    if not missing:
        return []
    return [
        checks.Warning(
            f"dashboard charts are missing {', '.join(missing)} in {VENDOR}",
            hint="run scripts/js-env (npm ci + copy; scripts/test and scripts/nettrail-up run it)",
            id="dashboard.W001",
        )
    ]

"""Browser-test harness: the real webapp (tests/daphne_server.py: daphne in a subprocess
with a throw-away NETTRAIL_DATA, users and a host token), and Debian's Chromium driven
by Playwright (sync API). No browser is downloaded: Playwright launches /usr/bin/chromium.
Screenshots go to artifacts/screenshots/ (gitignored).
Keep in sync with: webapp/serve.py, webapp/traces/tokens.py, tests/browser/dashboard_batch.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# VIEWER is re-exported for the browser tests, which import it from here.
from daphne_server import ADMIN, HOST, ROOT, VIEWER, Server, running_webapp  # noqa: F401

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
UPLOT = ROOT / "webapp/dashboard/static/dashboard/vendor/uplot/uPlot.iife.min.js"
# Counts the pixels of the plot canvas (inside the element with this id) close to one
# colour: a series' stroke, so grid lines and axes (drawn on the same canvas) do not count.
PAINTED = """([id, hex]) => {
  const c = document.querySelector('#' + id + ' canvas');
  if (!c || !c.width || !c.height) return 0;
  const want = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
  const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < px.length; i += 4) {
    if (px[i + 3] > 128 && Math.abs(px[i] - want[0]) < 40 && Math.abs(px[i + 1] - want[1]) < 40 && Math.abs(px[i + 2] - want[2]) < 40) n++;
  }
  return n;
}"""


@pytest.fixture(scope="package")
def server() -> Iterator[Server]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (Debian package chromium; scripts/install-system installs it)")
    if not UPLOT.exists():
        pytest.fail("uPlot is not installed: run scripts/js-env (scripts/test does)")
    with running_webapp(prefix="nettrail-browser-") as srv:
        yield srv


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


def log_in(page: Any, base: str, user: tuple[str, str]) -> None:
    page.goto(f"{base}/accounts/login/")
    page.fill("#id_username", user[0])
    page.fill("#id_password", user[1])
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")


@pytest.fixture(scope="package")
def admin_state(server: Server, browser: Any) -> dict[str, Any]:
    """Cookies of a logged-in admin, reused by every test's fresh context."""
    context = browser.new_context()
    page = context.new_page()
    log_in(page, server.url, ADMIN)
    state: dict[str, Any] = context.storage_state()
    context.close()
    return state


@pytest.fixture()
def page(server: Server, browser: Any, admin_state: dict[str, Any]) -> Iterator[Any]:
    # bypass_csp: Playwright's wait_for_function evaluates a string in the page, which the
    # webapp's CSP (no eval) blocks. test_dashboard_csp.py checks the CSP without it.
    context = browser.new_context(
        storage_state=admin_state, viewport={"width": 1366, "height": 900}, accept_downloads=True, bypass_csp=True
    )
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    context.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"


def screenshot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


@pytest.fixture(scope="package")
def ingested(server: Server) -> Any:
    """One connection's recorded life, ingested once for the tests that only read it."""
    from .dashboard_batch import build

    batch = build(HOST, sport=40100, cookie=100)
    result = server.ingest(batch.records)
    assert result == {"stored": len(batch.records), "duplicates": 0, "tracing": None}
    return batch

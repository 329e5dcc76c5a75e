"""The Content-Security-Policy in a real Chromium: every page loads, live websocket
included, without a single CSP violation on the console, while an inline script
injected into the same page is blocked and reported (so the check can fail).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import Server

pytestmark = pytest.mark.browser

PAGES = (
    "/",
    "/connections/",
    "/buffers/",
    "/udp/",
    "/counters/",
    "/alerts/",
    "/status/",
    "/captures/",
    "/captures/upload/",
)


@pytest.fixture()
def strict_page(browser: Any, admin_state: dict[str, Any]) -> Iterator[Any]:
    """A logged-in page that enforces the CSP (the shared `page` fixture bypasses it)."""
    context = browser.new_context(storage_state=admin_state, viewport={"width": 1366, "height": 900})
    yield context.new_page()
    context.close()


def watch_console(page: Any) -> list[str]:
    messages: list[str] = []
    page.on("console", lambda msg: messages.append(f"{msg.type}: {msg.text}"))
    return messages


def violations(messages: list[str]) -> list[str]:
    return [m for m in messages if "Content Security Policy" in m or "Content-Security-Policy" in m]


def test_every_dashboard_page_loads_without_a_csp_violation(server: Server, strict_page: Any, ingested: Any) -> None:
    page = strict_page
    messages = watch_console(page)
    found = []
    extra = (
        f"/connections/{ingested.uuid}/",
        f"/buffers/?conn={ingested.uuid}",
        f"/status/tracing/?host={ingested.host}",
    )
    for path in (*PAGES, *extra):
        resp = page.goto(f"{server.url}{path}")
        assert resp.status == 200, path
        assert "script-src 'self'" in resp.headers["content-security-policy"], path
        page.wait_for_load_state("networkidle")
        if ingested.uuid in path:
            # The buffer stage bars are sized through the CSSOM, not a blocked style attribute.
            widths = page.locator(".bar span").evaluate_all("els => els.map(e => e.style.width)")
            assert widths and all(w.endswith("%") for w in widths), (path, widths)
        found += [f"{path}: {v}" for v in violations(messages)]
        messages.clear()
    assert page.evaluate("document.getElementById('live-status').dataset.state") == "open"
    assert found == []


def test_the_login_page_loads_without_a_csp_violation(server: Server, browser: Any) -> None:
    context = browser.new_context()
    pg = context.new_page()
    messages = watch_console(pg)
    resp = pg.goto(f"{server.url}/accounts/login/")
    assert resp.status == 200
    pg.wait_for_load_state("networkidle")
    context.close()
    assert violations(messages) == []


def test_an_injected_inline_script_is_blocked_and_reported(server: Server, strict_page: Any) -> None:
    page = strict_page
    messages = watch_console(page)
    page.goto(f"{server.url}/alerts/")
    page.evaluate(
        "() => { const s = document.createElement('script'); s.textContent = 'window.injected = 1'; "
        "document.body.appendChild(s); }"
    )
    page.wait_for_timeout(200)
    assert page.evaluate("window.injected") is None
    assert len(violations(messages)) == 1

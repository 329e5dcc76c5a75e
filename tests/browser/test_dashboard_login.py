"""Dashboard access: anonymous users land on the login page; a user who logs in sees the overview."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import VIEWER, Server, log_in, screenshot

pytestmark = pytest.mark.browser

PAGES = ("/", "/connections/", "/buffers/", "/udp/", "/counters/", "/alerts/", "/status/")


def test_anonymous_users_are_sent_to_the_login_page(server: Server, browser: Any) -> None:
    context = browser.new_context()
    page = context.new_page()
    for path in PAGES:
        page.goto(server.url + path)
        assert page.url == f"{server.url}/accounts/login/?next={path}"
        assert page.locator("#id_username").is_visible()
    screenshot(page, "login")
    context.close()


def test_a_user_who_logs_in_sees_the_overview(server: Server, browser: Any) -> None:
    context = browser.new_context()
    page = context.new_page()
    log_in(page, server.url, VIEWER)
    assert page.locator("h1").inner_text() == "Overview"
    assert page.locator("header .user").inner_text() == VIEWER[0]
    page.wait_for_selector("#live-status[data-state=open]", timeout=30_000)
    context.close()

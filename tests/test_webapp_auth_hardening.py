"""Authentication hardening: login lockout (django-axes; per user and per address in
tests/test_login_throttle.py), the Content-Security-Policy header,
logout, session expiry (at its time) and session end closing the session's websockets, secure cookies under TLS,
static files through WhiteNoise. The browser side of the CSP is in
tests/browser/test_dashboard_csp.py; the origin check in tests/test_webapp_security.py.
"""

# ruff: noqa: F811 -- pytest fixtures imported from webapp_cast are redefined as test arguments

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.models import Session
from django.test import Client, override_settings
from django.utils import timezone
from test_webapp_settings import run_settings
from webapp_cast import ADMIN_PASSWORD, Cast, cast  # noqa: F401 (cast is a fixture)

from webapp.traces.session_close import CLOSE_SESSION_ENDED

pytestmark = pytest.mark.django_db
CSP = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'", "data:"],
    "connect-src": ["'self'"],
    "object-src": ["'none'"],
    "base-uri": ["'none'"],
    "frame-ancestors": ["'none'"],
    "form-action": ["'self'"],
}


def directives(header: str) -> dict[str, list[str]]:
    return {part.split()[0]: part.split()[1:] for part in header.split("; ")}


def log_in(client: Client, password: str) -> int:
    return int(client.post("/accounts/login/", {"username": "admin", "password": password}).status_code)


def test_sixty_wrong_passwords_lock_the_user_out_and_then_the_right_one_is_refused_too(cast: Cast) -> None:
    client = Client()
    statuses = [log_in(client, f"wrong-{i}") for i in range(60)]
    # The form answers the first four failures (200, "wrong password"); the fifth locks out.
    assert statuses == [200] * 4 + [429] * 56
    assert log_in(client, ADMIN_PASSWORD) == 429
    assert "_auth_user_id" not in client.session


def test_every_page_carries_the_content_security_policy(cast: Cast) -> None:
    client = Client()
    assert directives(client.get("/accounts/login/")["Content-Security-Policy"]) == CSP
    client.force_login(cast.viewer)
    for path in ("/", "/connections/", "/alerts/", "/api/hosts"):
        assert directives(client.get(path)["Content-Security-Policy"]) == CSP, path


def test_no_template_has_inline_script_or_style() -> None:
    root = Path(__file__).resolve().parents[1] / "webapp"
    offenders = []
    for template in root.glob("**/templates/**/*.html"):
        text = template.read_text()
        for needle in (
            "<script>",
            "<style",
            " style=",
            " onclick=",
            " onload=",
            " onchange=",
            " onsubmit=",
            "javascript:",
        ):
            if needle in text:
                offenders.append(f"{template.relative_to(root)}: {needle.strip()}")
    assert offenders == []


def test_static_files_are_served_by_whitenoise_without_a_login() -> None:
    resp = Client().get("/static/dashboard/js/common.js")
    assert resp.status_code == 200
    assert type(resp).__name__ == "WhiteNoiseFileResponse"
    assert Client().get("/static/dashboard/js/no-such-file.js").status_code in (302, 404)


def _session_cookie(client: Client) -> tuple[bytes, bytes]:
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


async def _open_socket(client: Client) -> WebsocketCommunicator:
    from webapp.asgi import application

    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), _session_cookie(client)]
    comm = WebsocketCommunicator(application, "/ws/live/", headers=headers)
    connected, code = await comm.connect(timeout=10)
    assert connected, code
    return comm


@pytest.mark.django_db(transaction=True)
async def test_logout_closes_the_sessions_open_websocket_and_not_another_sessions(cast: Cast) -> None:
    leaving, staying = Client(), Client()
    await sync_to_async(leaving.force_login)(cast.viewer)
    await sync_to_async(staying.force_login)(cast.viewer)
    closed, open_ = await _open_socket(leaving), await _open_socket(staying)
    resp = await sync_to_async(leaving.post)("/accounts/logout/")
    assert resp.status_code == 302
    assert await closed.receive_output(timeout=10) == {"type": "websocket.close", "code": CLOSE_SESSION_ENDED}
    assert await open_.receive_nothing(timeout=0.3)
    await open_.send_json_to({"subscribe": {"alerts": True}})
    assert (await open_.receive_json_from(timeout=10))["type"] == "subscribed"
    await open_.disconnect()


@pytest.mark.django_db(transaction=True)
@override_settings(NETTRAIL_LIVE_SESSION_CHECK_S=0.1)
async def test_a_session_that_ends_without_a_logout_closes_its_websocket(cast: Cast) -> None:
    client = Client()
    await sync_to_async(client.force_login)(cast.viewer)
    comm = await _open_socket(client)
    assert await comm.receive_nothing(timeout=0.3)  # re-checked a few times: still logged in
    await sync_to_async(Session.objects.all().delete)()  # expired and cleared, or deleted by an admin
    assert await comm.receive_output(timeout=10) == {"type": "websocket.close", "code": CLOSE_SESSION_ENDED}


@pytest.mark.django_db(transaction=True)
@override_settings(SESSION_COOKIE_AGE=2)  # the re-check stays at its 30 s: only the expiry timer can close
async def test_a_session_that_expires_closes_its_websocket_at_its_expiry_time(cast: Cast) -> None:
    client = Client()
    await sync_to_async(client.force_login)(cast.viewer)
    expiry = await sync_to_async(lambda: Session.objects.get().expire_date)()
    comm = await _open_socket(client)
    assert await comm.receive_nothing(timeout=max(0.0, (expiry - timezone.now()).total_seconds() - 0.5))
    assert await comm.receive_output(timeout=10) == {"type": "websocket.close", "code": CLOSE_SESSION_ENDED}
    assert timezone.now() >= expiry


@pytest.mark.django_db(transaction=True)
@override_settings(SESSION_COOKIE_AGE=2)
async def test_a_session_whose_expiry_moved_on_keeps_its_websocket_until_the_new_expiry(cast: Cast) -> None:
    client = Client()
    await sync_to_async(client.force_login)(cast.viewer)
    first = await sync_to_async(lambda: Session.objects.get().expire_date)()
    comm = await _open_socket(client)

    def slide() -> datetime:  # activity on a sliding session: saved again, expiry moved on
        store = SessionStore(client.cookies["sessionid"].value)
        store.set_expiry(4)
        store.save()
        return Session.objects.get().expire_date

    later = await sync_to_async(slide)()
    assert later > first
    assert await comm.receive_nothing(timeout=max(0.0, (later - timezone.now()).total_seconds() - 0.5))
    assert timezone.now() > first  # it lived past the first expiry
    assert await comm.receive_output(timeout=10) == {"type": "websocket.close", "code": CLOSE_SESSION_ENDED}
    assert timezone.now() >= later


def test_under_tls_the_cookies_are_secure_host_only_and_http_only(tmp_path: Path) -> None:
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.SESSION_COOKIE_NAME, s.SESSION_COOKIE_SECURE, s.SESSION_COOKIE_HTTPONLY, s.SESSION_COOKIE_SAMESITE, "
        "s.CSRF_COOKIE_NAME, s.CSRF_COOKIE_SECURE, s.CSRF_COOKIE_HTTPONLY)"
    )
    tls = run_settings(tmp_path, code, NETTRAIL_HTTPS="1")
    assert tls.stdout.split() == ["__Host-sessionid", "True", "True", "Lax", "__Host-csrftoken", "True", "True"]
    plain = run_settings(tmp_path, code)
    assert plain.stdout.split() == ["sessionid", "False", "True", "Lax", "csrftoken", "False", "True"]

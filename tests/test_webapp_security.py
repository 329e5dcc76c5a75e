"""Security: every URL needs login (or a token), CSRF on forms, websocket origin check, no secrets in logs."""

# ruff: noqa: F811 -- pytest fixtures imported from webapp_cast are redefined as test arguments

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RegexPattern, RoutePattern
from webapp_cast import ADMIN_PASSWORD, Cast, cast, post, retransmit  # noqa: F401 (cast is a fixture)

from nettrail.cli import main as nettrail
from webapp.traces.models import TcpRetransmit

pytestmark = pytest.mark.django_db
LOGIN_PAGES = ("/accounts/login/", "/admin/login/")
# URLs anonymous users may load, and why. Nothing else may answer without a login.
PUBLIC = {
    "/accounts/login/": "the login form",
    "/admin/login/": "the admin's login form",
    "/static/x": "static assets (JS, CSS) carry no data",
    "/favicon.ico": "a redirect to the static icon",
}
SAMPLES = {"int": "1", "uuid": "00000000-0000-0000-0000-000000000001"}


def example_path(route: str) -> str:
    """A concrete path for a URL pattern, filling each parameter with a sample value."""
    path = re.sub(r"\(\?P<\w+>([\w|]+)\)", lambda m: m.group(1).split("|")[0], route)  # (?P<app_label>auth)
    path = re.sub(r"\(\?P<\w+>[^)]*\)", "x", path)  # (?P<url>.*), (?P<path>.+)
    path = re.sub(r"<(?:(\w+):)?\w+>", lambda m: SAMPLES.get(m.group(1) or "str", "x"), path)
    return "/" + path.replace("^", "").replace("$", "")


def all_paths(patterns: list[URLPattern | URLResolver], prefix: str = "") -> Iterator[str]:
    for pattern in patterns:
        assert isinstance(pattern.pattern, RoutePattern | RegexPattern)
        if isinstance(pattern, URLResolver):
            yield from all_paths(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield example_path(prefix + str(pattern.pattern))


def test_the_url_walk_finds_the_known_endpoints() -> None:
    paths = set(all_paths(get_resolver().url_patterns))
    assert {"/", "/api/ingest", "/accounts/login/", "/admin/auth/user/x/change/", "/admin/auth/"} <= paths


def test_every_url_needs_a_login_or_a_token() -> None:
    client = Client()
    refused = []
    for path in sorted(set(all_paths(get_resolver().url_patterns))):
        if path in PUBLIC:
            continue
        statuses = []
        for method in ("get", "post", "put", "delete"):
            resp = getattr(client, method)(path)
            login_redirect = resp.status_code == 302 and resp.url.startswith(LOGIN_PAGES)
            statuses.append("login" if login_redirect else resp.status_code)
        # 405 means the view refused the method before doing anything; but some method
        # must reach the view, and there it must ask for a login or a token.
        if not set(statuses) <= {"login", 401, 403, 405} or set(statuses) == {405}:
            refused.append(f"{path}: GET/POST/PUT/DELETE -> {statuses}")
    assert refused == []


def test_the_public_urls_are_only_the_login_forms_and_static_files() -> None:
    client = Client()
    assert client.get("/accounts/login/").status_code == 200
    assert client.get("/admin/login/").status_code == 200
    assert client.get("/static/no-such-file.js").status_code == 404


def test_a_logged_in_viewer_sees_the_home_page_listing_hosts(cast: Cast) -> None:
    client = Client()
    client.force_login(cast.viewer)
    resp = client.get("/")
    assert resp.status_code == 200


def test_the_login_form_enforces_csrf(cast: Cast) -> None:
    client = Client(enforce_csrf_checks=True)
    form = {"username": "admin", "password": ADMIN_PASSWORD}
    assert client.post("/accounts/login/", form).status_code == 403
    client.get("/accounts/login/")
    token = client.cookies["csrftoken"].value
    resp = client.post("/accounts/login/", {**form, "csrfmiddlewaretoken": token})
    assert (resp.status_code, resp.url) == (302, "/")


def test_logout_needs_a_post_with_csrf(cast: Cast) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(cast.viewer)
    assert client.post("/accounts/logout/").status_code == 403
    assert client.get("/accounts/logout/").status_code == 405
    assert "_auth_user_id" in client.session


def test_ingest_needs_no_csrf_token_because_the_bearer_token_authenticates(cast: Cast) -> None:
    resp = post(Client(enforce_csrf_checks=True), cast.token_a, [retransmit("host-a", 1)])
    assert resp.json() == {"stored": 1, "duplicates": 0, "tracing": None}


def test_a_token_of_host_b_cannot_write_records_of_host_a(cast: Cast) -> None:
    resp = post(Client(), cast.token_b, [retransmit("host-a", 1)])
    assert resp.status_code == 403
    assert TcpRetransmit.objects.count() == 0


async def test_websockets_from_another_origin_are_refused() -> None:
    from webapp.asgi import application

    communicator = WebsocketCommunicator(application, "/ws/live/", headers=[(b"origin", b"http://evil.example")])
    connected, _ = await communicator.connect(timeout=10)
    assert connected is False
    await communicator.disconnect()


def _session_cookie(cast: Cast) -> bytes:
    client = Client()
    client.force_login(cast.viewer)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def _handshake(cookie: bytes, host: bytes, origin: bytes | None) -> bool:
    from webapp.asgi import application

    headers = [(b"host", host), (b"cookie", cookie)] + ([(b"origin", origin)] if origin else [])
    communicator = WebsocketCommunicator(application, "/ws/live/", headers=headers)
    connected, _ = await communicator.connect(timeout=10)
    await communicator.disconnect()
    return bool(connected)


@pytest.mark.django_db(transaction=True)
async def test_a_websocket_origin_must_match_scheme_host_and_port_exactly(cast: Cast) -> None:
    cookie = await sync_to_async(_session_cookie)(cast)
    page = b"127.0.0.1:8000"
    assert await _handshake(cookie, page, b"http://127.0.0.1:8000") is True
    assert await _handshake(cookie, page, b"http://127.0.0.1:9999") is False  # another port, same host
    assert await _handshake(cookie, page, b"https://127.0.0.1:8000") is False  # another scheme
    assert await _handshake(cookie, page, b"http://localhost:8000") is False  # another host name
    assert await _handshake(cookie, page, None) is False  # no Origin at all
    assert await _handshake(cookie, b"127.0.0.1", b"http://127.0.0.1:80") is True  # default port either way
    assert await _handshake(cookie, b"evil.example:8000", b"http://evil.example:8000") is False  # not an allowed host


def test_passwords_and_tokens_never_reach_the_logs(
    cast: Cast, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    client = Client()
    client.post("/accounts/login/", {"username": "admin", "password": ADMIN_PASSWORD})
    client.post("/accounts/login/", {"username": "admin", "password": ADMIN_PASSWORD + "-wrong"})
    post(Client(), cast.token_a, [retransmit("host-a", 1)])
    post(Client(), cast.token_a + "x", [retransmit("host-a", 2)])
    post(Client(), cast.token_b, [retransmit("host-a", 3)])
    assert nettrail(["token", "create", "host-c"]) == 0
    new_token = capsys.readouterr().out.strip()
    assert new_token.startswith("nt_")
    logged = caplog.text
    assert "Unauthorized: /api/ingest" in logged  # the failures were logged, without secrets
    for secret in (ADMIN_PASSWORD, cast.token_a, cast.token_b, new_token, new_token[12:]):
        assert secret not in logged


def test_staff_see_hosts_and_tokens_in_the_admin_but_cannot_add_tokens(cast: Cast) -> None:
    client = Client()
    client.force_login(cast.admin)
    page = client.get("/admin/traces/ingesttoken/")
    assert page.status_code == 200
    assert cast.token_a[:12] in page.content.decode()
    assert cast.token_a not in page.content.decode()
    assert client.get("/admin/traces/ingesttoken/add/").status_code == 403
    viewer = Client()
    viewer.force_login(cast.viewer)  # not staff
    assert viewer.get("/admin/traces/host/").status_code == 302

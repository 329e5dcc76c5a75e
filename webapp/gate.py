"""Refuse early: decide from a request's head alone whether its body may be read at all.

A body is read only when its request may have one: every path has a size limit
(ingest NETTRAIL_INGEST_MAX_BYTES, the capture upload its own, everything else
NETTRAIL_REQUEST_MAX_BYTES), and a request with a body must be authenticated first
(a valid ingest token on /api/ingest, a logged-in session elsewhere) unless it is a
login form. Requests without a body pass: Django's login middleware answers them.

The policy is used twice (keep both in step, docs/webapp.md "Security model"):
``RefuseEarly`` in webapp/asgi.py for any ASGI server that streams bodies to the
application, and webapp/daphne_gate.py, because daphne's Twisted layer reads a whole
body before it calls the ASGI application at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus
from importlib import import_module
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

import msgspec
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth import get_user
from django.http import parse_cookie
from django.urls import NoReverseMatch, reverse

INGEST_PATH = "/api/ingest"
API_PREFIX = "/api/"
# Forms an anonymous user must be able to post: logging in is how one stops being anonymous.
LOGIN_PATHS = frozenset({"/accounts/login/", "/admin/login/"})


@dataclass(frozen=True)
class Refusal:
    """The whole answer to a refused request; sent without reading its body."""

    status: int
    error: str
    location: str | None = None

    def body(self) -> bytes:
        return msgspec.json.encode({"error": self.error})

    def headers(self) -> list[tuple[bytes, bytes]]:
        out = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(self.body())).encode()),
            (b"x-content-type-options", b"nosniff"),
            # The body was not read: the connection cannot carry another request.
            (b"connection", b"close"),
        ]
        return out + ([(b"location", self.location.encode())] if self.location else [])

    def http11(self) -> bytes:
        """The response as HTTP/1.1 bytes, for a server layer below ASGI."""
        lines = [f"HTTP/1.1 {self.status} {HTTPStatus(self.status).phrase}".encode()]
        lines += [name + b": " + value for name, value in self.headers()]
        return b"\r\n".join(lines) + b"\r\n\r\n" + self.body()


@dataclass(frozen=True)
class Allowed:
    """The body may be read, up to `limit` bytes (a longer one is cut off with a 413)."""

    limit: int


@dataclass(frozen=True)
class Credential:
    """What must be checked (in the database) before the body is read."""

    kind: str  # "token" or "session"
    value: str
    limit: int
    path: str


Verdict = Refusal | Allowed


def too_large(limit: int) -> Refusal:
    return Refusal(413, f"body over {limit} bytes")


def body_limit(path: str) -> int:
    if path == INGEST_PATH:
        return int(settings.NETTRAIL_INGEST_MAX_BYTES)
    if path == _upload_path():
        from webapp.api.upload import FORM_OVERHEAD, max_bytes

        return max_bytes() + FORM_OVERHEAD
    return int(settings.NETTRAIL_REQUEST_MAX_BYTES)


def _upload_path() -> str | None:
    try:
        return str(reverse("capture-upload"))
    except NoReverseMatch:  # the read API app is optional
        return None


def header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


def decide_head(scope: dict[str, Any]) -> Verdict | Credential:
    """What the request head alone decides; a Credential still needs `verify`."""
    path: str = scope["path"]
    headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
    if "\x00" in path or b"%00" in bytes(scope.get("query_string", b"")):
        # Text columns of PostgreSQL cannot hold NUL: no URL may carry one to a query.
        return Refusal(400, "NUL character in the URL")
    limit = body_limit(path)
    length = header(headers, b"content-length")
    chunked = header(headers, b"transfer-encoding") is not None
    if length is not None and not length.strip().isdigit():
        return Refusal(400, "Content-Length is not a number")
    declared = int(length) if length is not None else 0
    if declared > limit:
        return too_large(limit)
    if declared == 0 and not chunked:
        return Allowed(limit)  # no body to refuse: the views and middleware decide
    if path in LOGIN_PATHS:
        return Allowed(limit)
    if path == INGEST_PATH:
        token = _bearer(header(headers, b"authorization"))
        return Refusal(401, "missing ingest token") if token is None else Credential("token", token, limit, path)
    session = parse_cookie(header(headers, b"cookie") or "").get(settings.SESSION_COOKIE_NAME)
    if not session:
        return login_required(path)
    return Credential("session", session, limit, path)


def login_required(path: str) -> Refusal:
    if path.startswith(API_PREFIX):
        return Refusal(401, "login required")
    # A page's form posted after the session ended: back to the login form, as Django would.
    return Refusal(302, "login required", f"{settings.LOGIN_URL}?next={quote(path)}")


async def check(scope: dict[str, Any]) -> Verdict:
    """The full decision, database look-ups included."""
    head = decide_head(scope)
    if not isinstance(head, Credential):
        return head
    return await verify(head)


async def verify(cred: Credential) -> Verdict:
    if cred.kind == "token":
        ok = await _token_is_known(cred.value)
        return Allowed(cred.limit) if ok else Refusal(401, "unknown ingest token")
    ok = await session_is_logged_in(cred.value)
    return Allowed(cred.limit) if ok else login_required(cred.path)


def _bearer(value: str | None) -> str | None:
    scheme, _, token = (value or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


@database_sync_to_async
def _token_is_known(raw: str) -> bool:
    from webapp.traces import tokens

    return tokens.authenticate(raw) is not None


@database_sync_to_async
def session_is_logged_in(key: str) -> bool:
    # Django's own check (session exists, user active, password hash unchanged), as the
    # authentication middleware would run it on the same cookie.
    store = import_module(settings.SESSION_ENGINE).SessionStore(key)
    return bool(get_user(SimpleNamespace(session=store)).is_authenticated)

"""Websocket origin check: the Origin must be exactly the origin the socket was opened on.

Browsers send the cookie of the webapp with a websocket handshake whatever page opens
it, so a page of another origin (another port on the same host included) could read
the live feed with the user's session. Channels' AllowedHostsOriginValidator compares
host names only; here scheme, host and port must all equal the request's own
(``Host`` header, ws/wss or, behind the TLS proxy of NETTRAIL_HTTPS,
``X-Forwarded-Proto``), as Django's CSRF check does for forms. Origins listed in
CSRF_TRUSTED_ORIGINS (a proxy on another origin) are accepted too, and the host must
be in ALLOWED_HOSTS.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

from webapp.gate import header

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]
DEFAULT_PORTS = {"http": 80, "https": 443}


class SameOriginValidator:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "websocket" and not same_origin(scope):
            await WebsocketDenier()(scope, receive, send)  # closes before accept: handshake refused (403)
            return
        await self.app(scope, receive, send)


def same_origin(scope: Scope) -> bool:
    headers: list[tuple[bytes, bytes]] = list(scope.get("headers", []))
    origin, host = header(headers, b"origin"), header(headers, b"host")
    if origin is None or host is None:
        return False
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return False
    origin_key = _origin_key(origin)
    if origin_key is None:
        return False
    if origin_key in {_origin_key(trusted) for trusted in settings.CSRF_TRUSTED_ORIGINS}:
        return True
    return origin_key == _origin_key(f"{_scheme(scope, headers)}://{host}")


def _scheme(scope: Scope, headers: list[tuple[bytes, bytes]]) -> str:
    if settings.NETTRAIL_HTTPS and (header(headers, b"x-forwarded-proto") or "").lower() == "https":
        return "https"
    return "https" if scope.get("scheme") in ("wss", "https") else "http"


def _origin_key(origin: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) with the scheme's default port filled in; None when malformed."""
    try:
        parts = urlsplit(origin.strip().lower())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/"):
        return None
    return parts.scheme, parts.hostname, port if port is not None else DEFAULT_PORTS[parts.scheme]

"""Strict readers for settings taken from environment variables.

Each helper returns the parsed value or raises ``ImproperlyConfigured`` naming the
variable and what it accepts, so a typo stops the server at start-up instead of
being silently replaced by a default. Used by ``webapp/settings.py`` only; the
variables are documented in ``docs/webapp.md`` (keep the two in sync).
"""

from __future__ import annotations

import os
import re
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")
# A host name, an IP literal, a bracketed IPv6 literal, or a leading-dot domain wildcard.
_HOST_RE = re.compile(r"^(\*|\.?[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?|\[[0-9A-Fa-f:.]+\]|[0-9.]+)$")


def _raw(name: str, env: dict[str, str] | None) -> str | None:
    return (os.environ if env is None else env).get(name)


def env_bool(name: str, default: bool, env: dict[str, str] | None = None) -> bool:
    value = _raw(name, env)
    if value is None:
        return default
    low = value.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r}: expected one of {', '.join(_TRUE + _FALSE[:-1])}")


def env_text(name: str, default: str, env: dict[str, str] | None = None) -> str:
    value = _raw(name, env)
    return default if value is None else value.strip()


def env_int(name: str, default: int, minimum: int = 0, env: dict[str, str] | None = None) -> int:
    value = _raw(name, env)
    if value is None:
        return default
    try:
        number = int(value.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r}: expected a whole number") from None
    if number < minimum:
        raise ImproperlyConfigured(f"{name}={value!r}: must be at least {minimum}")
    return number


def env_hosts(name: str, default: list[str], env: dict[str, str] | None = None) -> list[str]:
    """Comma-separated host names for ALLOWED_HOSTS; rejects URLs, spaces and empty items."""
    value = _raw(name, env)
    if value is None:
        return default
    hosts = [h.strip() for h in value.split(",")]
    for host in hosts:
        if not _HOST_RE.match(host):
            raise ImproperlyConfigured(
                f"{name}={value!r}: {host!r} is not a host name (expected e.g. 'nettrail.example.org,127.0.0.1')"
            )
    return hosts


def env_origins(name: str, env: dict[str, str] | None = None) -> list[str]:
    """Comma-separated origins (scheme://host[:port]) for CSRF_TRUSTED_ORIGINS; empty by default."""
    value = _raw(name, env)
    if value is None or not value.strip():
        return []
    origins = [o.strip() for o in value.split(",")]
    for origin in origins:
        if not re.match(r"^https?://[^\s/,]+$", origin):
            raise ImproperlyConfigured(
                f"{name}={value!r}: {origin!r} is not an origin like https://nettrail.example.org"
            )
    return origins


def env_secret_key(name: str, env: dict[str, str] | None = None) -> str | None:
    """A given SECRET_KEY must be long and varied enough for Django's deploy check."""
    value = _raw(name, env)
    if value is None:
        return None
    if len(value) < 50 or len(set(value)) < 5 or value.startswith("django-insecure-"):
        raise ImproperlyConfigured(f"{name}: must be at least 50 characters with at least 5 distinct ones")
    return value


def env_database(name: str, default_sqlite_path: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """DATABASE_URL (sqlite:// or postgres://) or the SQLite file in the data directory."""
    value = _raw(name, env)
    url = value if value is not None else f"sqlite:///{default_sqlite_path}"
    if not url.startswith(("sqlite://", "postgres://", "postgresql://", "pgsql://")):
        raise ImproperlyConfigured(f"{name}={value!r}: expected sqlite:///PATH or postgres://USER:PASS@HOST:PORT/DB")
    try:
        config: dict[str, Any] = dict(dj_database_url.parse(url))
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from None
    if not config.get("NAME"):
        raise ImproperlyConfigured(f"{name}={value!r}: names no database")
    return config


def env_channel_layer(name: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """`memory` (default, one process) or `redis://HOST:PORT/DB` for channels_redis."""
    value = _raw(name, env)
    if value is None or value.strip() == "memory":
        return {"BACKEND": "channels.layers.InMemoryChannelLayer"}
    if re.match(r"^rediss?://[^\s/]+(/\d+)?$", value.strip()):
        # webapp/bus/layer.py: channels_redis, surviving a Redis restart.
        return {"BACKEND": "webapp.bus.layer.ResilientRedisChannelLayer", "CONFIG": {"hosts": [value.strip()]}}
    raise ImproperlyConfigured(f"{name}={value!r}: expected 'memory' or redis://HOST:PORT[/DB]")

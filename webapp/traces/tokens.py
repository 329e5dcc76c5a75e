"""Per-host ingest tokens: created once, stored as sha256, checked on every batch.

A raw token is ``nt_`` + 43 url-safe characters (256 random bits). Only its first
TOKEN_PREFIX_LENGTH characters (to find and name the row) and its sha256 are
stored; the raw token is returned to the caller once and never logged.
Keep in sync with nettrail/commands/token.py and docs/webapp.md.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from django.utils import timezone

from webapp.traces.models import TOKEN_PREFIX_LENGTH, Host, IngestToken

TOKEN_MARK = "nt_"
# Host names of browser uploads start with this (webapp/api/upload.py); no token is ever
# made for such a name, so no collector can write into a capture and no upload into a
# live host. (A host name has no colon: hostnames cannot hold one.)
CAPTURE_PREFIX = "capture:"


def token_digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def create_token(host_name: str, label: str = "") -> tuple[IngestToken, str]:
    """Make a token for host_name (registering the host if new); returns (row, raw token).
    Raises ValueError for a name with the reserved capture prefix."""
    if host_name.startswith(CAPTURE_PREFIX):
        raise ValueError(f"host names starting with {CAPTURE_PREFIX!r} are reserved for uploaded captures")
    host, _ = Host.objects.get_or_create(name=host_name)
    raw = TOKEN_MARK + secrets.token_urlsafe(32)
    row = IngestToken.objects.create(host=host, prefix=raw[:TOKEN_PREFIX_LENGTH], digest=token_digest(raw), label=label)
    return row, raw


def authenticate(raw: str) -> IngestToken | None:
    if not raw.startswith(TOKEN_MARK) or len(raw) < TOKEN_PREFIX_LENGTH:
        return None
    wanted = token_digest(raw)
    rows: list[IngestToken] = list(IngestToken.objects.filter(prefix=raw[:TOKEN_PREFIX_LENGTH]).select_related("host"))
    return next((row for row in rows if hmac.compare_digest(row.digest, wanted)), None)


def mark_used(row: IngestToken) -> None:
    now = timezone.now()
    IngestToken.objects.filter(pk=row.pk).update(last_used=now)
    Host.objects.filter(pk=row.host_id).update(last_seen=now)


def revoke(prefix: str) -> int:
    """Delete the tokens whose prefix starts with `prefix`; returns how many."""
    if not prefix:
        return 0
    count: int = IngestToken.objects.filter(prefix__startswith=prefix).delete()[0]
    return count

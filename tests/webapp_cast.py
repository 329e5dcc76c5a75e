"""The fixed cast for the webapp core tests (ingest, tokens, lifecycle, retention, security).

Who may do what:
- `admin` (superuser) and `viewer` (plain user): both may see every page and every
  host once logged in -- nettrail has no per-host read permissions;
- anonymous: sees only the login page; everything else redirects there (pages) or
  answers 401 (API);
- host A (`host-a`, token_a) and host B (`host-b`, token_b): each token may write
  only records whose host_id is its own host; neither may read anything.
Record helpers build valid records of a few kinds with explicit seq numbers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.test import Client

from translators import records as r
from webapp.traces.models import Host
from webapp.traces.tokens import create_token

BOOT = "boot-1"
T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z: ingest refuses times before 2000 (webapp/traces/timestamps.py)
ADMIN_PASSWORD = "admin-pw-7Qe2-unguessable"
VIEWER_PASSWORD = "viewer-pw-9Zk4-unguessable"


@dataclass
class Cast:
    admin: AbstractBaseUser
    viewer: AbstractBaseUser
    host_a: Host
    host_b: Host
    token_a: str
    token_b: str


@pytest.fixture
def cast(db: None) -> Iterator[Cast]:
    users = get_user_model()
    admin = users.objects.create_superuser("admin", password=ADMIN_PASSWORD)
    viewer = users.objects.create_user("viewer", password=VIEWER_PASSWORD)
    row_a, token_a = create_token("host-a")
    row_b, token_b = create_token("host-b")
    yield Cast(admin, viewer, row_a.host, row_b.host, token_a, token_b)


def env(host: str, seq: int, **kw: Any) -> dict[str, Any]:
    return {"host_id": host, "boot_id": BOOT, "seq": seq, "ts_ns": 1_000_000 * seq, "ts_wall": T0 + seq, **kw}


def state(host: str, seq: int, prev: str, new: str, conn: str = "conn-1", **kw: Any) -> r.TcpStateChange:
    flow = {"src": "10.0.0.1", "sport": 40000, "dst": "10.0.0.2", "dport": 443, "ip_ver": 4}
    return r.TcpStateChange(
        **env(host, seq, conn_uuid=conn, **{**flow, **kw}),
        provider="tcp",
        probe="state-change",
        prev_state=prev,
        state=new,
    )


def drop(host: str, seq: int, reason: str = "NO_SOCKET", **kw: Any) -> r.SkbDrop:
    return r.SkbDrop(**env(host, seq, **kw), provider="skb", probe="m-free", drop_reason=2, drop_reason_str=reason)


def retransmit(host: str, seq: int, conn: str = "conn-1", **kw: Any) -> r.TcpRetransmit:
    return r.TcpRetransmit(**env(host, seq, conn_uuid=conn, **kw), provider="tcp", probe="retransmit")


def post(client: Client, token: str | None, body: bytes | list[Any], wire: str = "msgpack") -> Any:
    """POST a batch to /api/ingest; lists are encoded in the given wire form."""
    if not isinstance(body, bytes):
        body = msgspec.msgpack.encode(body) if wire == "msgpack" else msgspec.json.encode(body)
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return client.post("/api/ingest", body, content_type=f"application/{wire}", **headers)

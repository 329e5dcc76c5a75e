"""The ASGI guard refuses oversized ingest bodies before Django spools them (webapp/refuse_early.py).

In process, through the ASGI application; tests/test_refuse_early.py checks the same against a
real daphne, where the refusal happens below the ASGI layer (webapp/daphne_gate.py).
"""

from __future__ import annotations

import msgspec
import pytest
from asgiref.sync import sync_to_async
from channels.testing import HttpCommunicator
from django.test import override_settings

from translators import records as r
from webapp.asgi import application
from webapp.traces.models import TcpRetransmit
from webapp.traces.tokens import create_token

LIMIT = 4096


def batch(count: int) -> bytes:
    recs = [r.TcpRetransmit(host_id="host-a", boot_id="b", seq=i, ts_ns=i, ts_wall=1.7e9, provider="tcp", probe="retransmit")
            for i in range(count)]  # fmt: skip
    return msgspec.msgpack.encode(recs)


def headers(token: str, body: bytes, declare: bool = True) -> list[tuple[bytes, bytes]]:
    out = [
        (b"host", b"127.0.0.1"),
        (b"content-type", b"application/msgpack"),
        (b"authorization", f"Bearer {token}".encode()),
    ]
    return out + ([(b"content-length", str(len(body)).encode())] if declare else [])


@override_settings(NETTRAIL_INGEST_MAX_BYTES=LIMIT)
async def test_a_declared_oversized_body_gets_413_before_anything_is_read() -> None:
    body = batch(200)
    assert len(body) > LIMIT
    comm = HttpCommunicator(application, "POST", "/api/ingest", body=body, headers=headers("nt_not-checked", body))
    resp = await comm.get_response(timeout=10)
    assert resp["status"] == 413
    assert msgspec.json.decode(resp["body"]) == {"error": f"body over {LIMIT} bytes"}


@pytest.mark.django_db(transaction=True)
@override_settings(NETTRAIL_INGEST_MAX_BYTES=LIMIT)
async def test_a_body_under_the_limit_reaches_ingest() -> None:
    _, token = await sync_to_async(create_token)("host-a")
    body = batch(3)
    comm = HttpCommunicator(application, "POST", "/api/ingest", body=body, headers=headers(token, body))
    resp = await comm.get_response(timeout=10)
    assert (resp["status"], msgspec.json.decode(resp["body"])) == (200, {"stored": 3, "duplicates": 0, "tracing": None})


@pytest.mark.django_db(transaction=True)
@override_settings(NETTRAIL_INGEST_MAX_BYTES=LIMIT)
async def test_an_undeclared_oversized_body_is_cut_off_with_413_and_stores_nothing() -> None:
    _, token = await sync_to_async(create_token)("host-a")
    body = batch(200)
    comm = HttpCommunicator(application, "POST", "/api/ingest", body=body, headers=headers(token, body, declare=False))
    resp = await comm.get_response(timeout=5)
    assert (resp["status"], msgspec.json.decode(resp["body"])) == (413, {"error": f"body over {LIMIT} bytes"})
    assert await sync_to_async(TcpRetransmit.objects.count)() == 0

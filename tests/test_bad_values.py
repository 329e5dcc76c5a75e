"""Bad values are refused with a 400 naming them, never stored, never a 500: at ingest
(webapp/traces/values.py), in query parameters and path parts, in the filter language,
and NUL characters anywhere in a URL (webapp/gate.py). tests/test_api_fuzz.py fuzzes
the whole API with schemathesis.
"""

# ruff: noqa: F811 -- pytest fixtures imported from webapp_cast are redefined as test arguments

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from asgiref.sync import sync_to_async
from channels.testing import HttpCommunicator
from django.test import Client
from webapp_cast import Cast, cast, post, retransmit  # noqa: F401 (cast is a fixture)

from webapp.traces.models import Connection, TcpRetransmit
from webapp.traces.values import MAX_TEXT

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]  # NUL and 64-bit limits matter most there
NINES = "9" * 400


def raw_record(seq: int, **fields: Any) -> dict[str, Any]:
    """A record as a msgpack map, so values the Python record types refuse to build can be sent."""
    good = msgspec.to_builtins(retransmit("host-a", seq))
    return {**good, **fields}


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("ts_wall", float("inf"), "inf is not a finite number"),
        ("ts_wall", float("-inf"), "-inf is not a finite number"),
        ("ts_wall", float("nan"), "nan is not a finite number"),
        ("ts_ns", 2**63, f"{2**63} does not fit a signed 64-bit column"),
        ("comm", "curl\x00evil", "text cannot hold NUL characters"),
        ("comm", "x" * (MAX_TEXT + 1), f"text longer than {MAX_TEXT} characters"),
    ],
)
def test_ingest_refuses_a_bad_value_naming_its_record_and_field_and_stores_nothing(
    cast: Cast, field: str, value: Any, why: str
) -> None:
    batch = [raw_record(1), raw_record(2, **{field: value})]
    resp = post(Client(), cast.token_a, msgspec.msgpack.encode(batch))
    assert (resp.status_code, resp.json()) == (400, {"error": f"record 1: {field}: {why}", "index": 1, "field": field})
    assert (TcpRetransmit.objects.count(), Connection.objects.count()) == (0, 0)


def test_ingest_stores_the_longest_allowed_text(cast: Cast) -> None:
    resp = post(Client(), cast.token_a, msgspec.msgpack.encode([raw_record(1, comm="x" * MAX_TEXT)]))
    assert resp.json() == {"stored": 1, "duplicates": 0, "tracing": None}


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/api/dash/skb/99999999999999999999999", "uid is out of range (at most 9223372036854775807)"),
        ("/api/dash/alerts/99999999999999999999999/ack", None),
        ("/api/connections?pid=99999999999999999999999", "pid is out of range (a signed 64-bit number)"),
        ("/api/connections?since=1e999", "since must be a finite number"),
        (
            "/api/dash/connections?q=bytes+>+" + NINES,
            "bytes is out of range (at most 9223372036854775807) (at character 9)",
        ),
        (
            "/api/dash/connections?q=pid+=+" + NINES,
            "pid is out of range (at most 9223372036854775807) (at character 7)",
        ),
    ],
)
def test_out_of_range_numbers_in_urls_answer_400(cast: Cast, path: str, error: str | None) -> None:
    client = Client()
    client.force_login(cast.viewer)
    resp = client.get(path) if error is not None else client.post(path)
    assert resp.status_code == 400
    if error is not None:
        assert resp.json()["error"] == error


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/api/connections?comm=a%00b", "/api/dash/connections?q=comm+%3D+a%00", "/x%00/"])
async def test_a_nul_character_anywhere_in_the_url_answers_400(cast: Cast, path: str) -> None:
    from webapp.asgi import application

    client = Client()
    await sync_to_async(client.force_login)(cast.viewer)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    route, _, query = path.partition("?")
    comm = HttpCommunicator(application, "GET", path, headers=[(b"host", b"127.0.0.1"), (b"cookie", cookie)])
    comm.scope["path"] = route.replace("%00", "\x00")  # as the server hands it over: unquoted
    comm.scope["query_string"] = query.encode()
    resp = await comm.get_response(timeout=10)
    assert (resp["status"], msgspec.json.decode(resp["body"])) == (400, {"error": "NUL character in the URL"})

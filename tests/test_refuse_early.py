"""Refuse early, against a real daphne: a refused request's body is never read (webapp/daphne_gate.py).

A raw-socket client streams up to 1 GiB and stops at the first byte of an answer; the
server's own read counter (/proc/PID/io rchar: every byte read from sockets and files)
shows how much of the body it took in. Limits are lowered for the server under test
(256 KiB for ingest and other requests) so "cut at the limit" stays well under 1 MiB.
"""

from __future__ import annotations

import json
import select
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import pytest
from daphne_server import Server, running_webapp

from translators import records as r
from translators.records import to_builtins

pytestmark = pytest.mark.slow
GIB = 1024**3
MIB = 1024**2
LIMIT = 256 * 1024
CHUNK = b"x" * (64 * 1024)
# "Answered before reading": far below the seconds a 1 GiB body takes, with a wide
# margin for a loaded machine (the answer comes in milliseconds).
ANSWER_WITHIN_S = 3.0


@pytest.fixture(scope="module")
def server() -> Server:
    env = {"NETTRAIL_INGEST_MAX_BYTES": str(LIMIT), "NETTRAIL_REQUEST_MAX_BYTES": str(LIMIT)}
    with running_webapp(env, prefix="nettrail-refuse-") as srv:
        yield srv  # type: ignore[misc]


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    sent: int  # body bytes the client got into its socket before the answer
    seconds: float  # from the request head to the answer's first byte
    server_read: int  # rchar growth of the server process


def stream(
    server: Server, path: str, total: int, headers: dict[str, str], chunked: bool, fill: bytes = CHUNK
) -> Answer:
    """POST `total` body bytes (`fill` repeated) to `path`, sending only while no answer has come."""
    url = urlsplit(server.url)
    framing = {"Transfer-Encoding": "chunked"} if chunked else {"Content-Length": str(total)}
    head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": url.netloc, **framing, **headers}.items())
    before = server.rchar()
    sock = socket.create_connection((url.hostname, url.port), timeout=10)
    sock.setblocking(False)
    pending = f"POST {path} HTTP/1.1\r\n{head}\r\n".encode()
    start, sent, got, first, ended = time.monotonic(), 0, b"", None, not chunked
    try:
        while time.monotonic() - start < 30:
            want_write = not got and bool(pending or sent < total or not ended)
            readable, writable, _ = select.select([sock], [sock] if want_write else [], [], 0.2)
            if readable:
                data = sock.recv(65536)
                if first is None and data:
                    first = time.monotonic() - start
                got += data
                if not data or _complete(got):
                    break
            if writable:
                if not pending and sent == total:
                    pending, ended = b"0\r\n\r\n", True  # the last chunk
                elif not pending:
                    piece = fill[: total - sent]
                    pending = (b"%x\r\n" % len(piece)) + piece + b"\r\n" if chunked else piece
                    sent += len(piece)
                try:
                    pending = pending[sock.send(pending) :]
                except (BrokenPipeError, ConnectionResetError):
                    pending = b""
                    break
    finally:
        sock.close()
    assert first is not None, f"no answer after sending {sent} bytes"
    status_line, _, rest = got.partition(b"\r\n")
    raw_headers, _, body = rest.partition(b"\r\n\r\n")
    fields = dict(line.decode().split(": ", 1) for line in raw_headers.split(b"\r\n") if line)
    return Answer(int(status_line.split()[1]), {k.lower(): v for k, v in fields.items()}, body, sent, first,
                  server.rchar() - before)  # fmt: skip


def _complete(got: bytes) -> bool:
    head, sep, body = got.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


def assert_refused_unread(answer: Answer, status: int, error: str) -> None:
    assert (answer.status, json.loads(answer.body)) == (status, {"error": error})
    assert answer.server_read < MIB, f"the server read {answer.server_read} bytes"
    assert answer.seconds < ANSWER_WITHIN_S
    assert answer.sent < GIB  # the client was still sending when the answer came


def test_an_anonymous_chunked_gigabyte_to_a_page_is_sent_to_the_login_form_unread(server: Server) -> None:
    answer = stream(server, "/alerts/", GIB, {}, chunked=True)
    assert_refused_unread(answer, 302, "login required")
    assert answer.headers["location"] == "/accounts/login/?next=/alerts/"


def test_an_anonymous_chunked_gigabyte_to_the_api_gets_401_unread(server: Server) -> None:
    assert_refused_unread(stream(server, "/api/dash/alerts/1/ack", GIB, {}, chunked=True), 401, "login required")


def test_an_anonymous_gigabyte_with_a_forged_session_cookie_gets_401_unread(server: Server) -> None:
    cookie = {"Cookie": "sessionid=abcdefghijklmnopqrstuvwxyz012345"}
    assert_refused_unread(stream(server, "/api/dash/alerts/1/ack", GIB, cookie, chunked=True), 401, "login required")


def test_a_declared_gigabyte_to_the_login_form_gets_413_unread(server: Server) -> None:
    answer = stream(server, "/accounts/login/", GIB, {}, chunked=False)
    assert_refused_unread(answer, 413, f"body over {LIMIT} bytes")


def test_a_chunked_gigabyte_to_the_login_form_is_cut_at_the_limit_with_413(server: Server) -> None:
    answer = stream(server, "/accounts/login/", GIB, {}, chunked=True)
    assert_refused_unread(answer, 413, f"body over {LIMIT} bytes")


def test_an_upload_over_its_limit_by_content_length_gets_413_unread(server: Server) -> None:
    session = server.login()
    cookie = {"Cookie": f"sessionid={session.cookies['sessionid']}", "Content-Type": "multipart/form-data; boundary=b"}
    answer = stream(server, "/captures/upload/", GIB, cookie, chunked=False)
    assert_refused_unread(answer, 413, f"body over {64 * MIB + 64 * 1024} bytes")


def test_ingest_without_a_token_or_with_a_wrong_one_gets_401_unread(server: Server) -> None:
    assert_refused_unread(stream(server, "/api/ingest", GIB, {}, chunked=True), 401, "missing ingest token")
    wrong = {"Authorization": "Bearer nt_" + "A" * 43}
    assert_refused_unread(stream(server, "/api/ingest", GIB, wrong, chunked=True), 401, "unknown ingest token")


def test_a_chunked_ingest_body_over_the_limit_gets_413_at_the_limit_and_stores_nothing(server: Server) -> None:
    auth = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"}
    answer = stream(server, "/api/ingest", GIB, auth, chunked=True)
    assert_refused_unread(answer, 413, f"body over {LIMIT} bytes")
    session = server.login()
    assert session.get(f"{server.url}/api/hosts", timeout=10).json()["hosts"][0]["last_seen"] is None


@pytest.mark.parametrize("chunked", [False, True])
def test_a_small_ingest_body_with_a_token_is_stored(server: Server, chunked: bool) -> None:
    """The body comes with the headers while the token is checked: held, then handed to the app."""
    rec = r.TcpRetransmit(host_id="browser-host", boot_id="refuse-early", seq=int(chunked), ts_ns=1, ts_wall=1.0,
                          provider="tcp", probe="retransmit")  # fmt: skip
    body = json.dumps([to_builtins(rec)]).encode()
    auth = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"}
    answer = stream(server, "/api/ingest", len(body), auth, chunked=chunked, fill=body)
    assert (answer.status, json.loads(answer.body)) == (200, {"stored": 1, "duplicates": 0})


def test_a_logged_in_form_post_is_read_and_answered_by_django(server: Server) -> None:
    session = server.login()
    resp = session.post(
        f"{server.url}/accounts/logout/",
        data={"csrfmiddlewaretoken": session.cookies["csrftoken"]},
        allow_redirects=False,
        timeout=10,
    )
    assert (resp.status_code, resp.headers["location"]) == (302, "/accounts/login/")

"""`nettrail up`'s local collector sends its token to the webapp's account only (issue #33, item 2).

The real `nettrail up` runs the webapp as `nettrail` (on its port and on the Unix socket
in the data directory); the sink is the one `nettrail collect` builds from exactly the
arguments `nettrail up` gives its collector (``collector_arguments``). With the webapp
up, batches are delivered over the socket. With it down, `nobody` binds the webapp's
old TCP port and serves HTTP on a Unix socket of its own (it cannot create one in the
data directory), answering any request 200 with a ``tracing`` request: neither listener
receives a byte (its socket, even owned by the webapp's account, is held by the wrong
uid; a symlink to it is not followed), no batch is counted sent, and no sink holds a
``tracing`` answer (`--providers-from-server` has nothing to obey): the batches wait
in the spool. A root collector told to ship plain HTTP to a port is warned of it.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ingest_stub import TOKEN, IngestStub, make_records

from collector.sinks.http import PORT_HOLDER_WARNING, HttpSink
from collector.sinks.token_source import write_token_file
from nettrail.cli import build_parser
from nettrail.commands.collect import open_sink
from nettrail.commands.up import WEBAPP_USER, collector_arguments
from nettrail.commands.up_dirs import ensure_user
from tests.daphne_server import readable_python
from tests.test_nettrail_up import REPO, collector_dir_of, free_port, readable_by_others, up_env, wait_for_line

HOST = "impostor-test-host"
WAIT = 90.0  # seconds: a bound for a loaded machine, not a speed expectation
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: nettrail up runs the webapp as another user"),
    pytest.mark.skipif(not readable_by_others(REPO), reason=f"the checkout {REPO} is in a private directory"),
]

# Run as `nobody`: takes the port and a socket, tries the webapp's socket path, and
# answers every request as the webapp would, with a tracing request; on stdin's end it
# prints what each listener received.
IMPOSTOR = r"""
import json, socket, sys, threading
port, own, taken = int(sys.argv[1]), sys.argv[2], sys.argv[3]
body = json.dumps({"stored": 1, "duplicates": 0, "tracing": {"providers": ["tcp"]}}).encode()
answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
got = {"tcp": [], "unix": []}
def serve(listener, name):
    while True:
        conn, _ = listener.accept()
        conn.settimeout(5)
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            if data:
                conn.sendall(answer)
        except OSError:
            pass
        got[name].append(data.decode("latin-1"))
        conn.close()
tcp = socket.socket()
tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
tcp.bind(("127.0.0.1", port))
tcp.listen()
unix = socket.socket(socket.AF_UNIX)
unix.bind(own)
unix.listen()
try:
    socket.socket(socket.AF_UNIX).bind(taken)
    tried = "bound"
except OSError as exc:
    tried = exc.strerror
for listener, name in ((tcp, "tcp"), (unix, "unix")):
    threading.Thread(target=serve, args=(listener, name), daemon=True).start()
print("ready " + tried, flush=True)
sys.stdin.read()
print(json.dumps(got), flush=True)
"""


@pytest.fixture
def data_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="nettrail-imp-"))  # short: the socket's path has 107 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(collector_dir_of(path), ignore_errors=True)


def run_as(account: pwd.struct_passwd, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [readable_python(account.pw_name), *args], cwd=REPO, env={**env, "HOME": "/nonexistent"},
        capture_output=True, text=True, timeout=WAIT, user=account.pw_uid, group=account.pw_gid, extra_groups=[],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def local_sink(data_dir: Path, token: str) -> HttpSink:
    """The sink `nettrail collect` opens with `nettrail up`'s arguments for its collector."""
    mine = collector_dir_of(data_dir)
    write_token_file(mine / "collector.token", token)
    argv = ["collect", *collector_arguments(data_dir / "webapp.sock", mine)]
    sink = open_sink(build_parser(argv).parse_args(argv))
    assert isinstance(sink, HttpSink)
    sink.flush_interval, sink.retry_interval = 0.05, 0.2
    return sink


def wait_spooled(sink: HttpSink) -> None:
    deadline = time.monotonic() + WAIT
    while not sink.spooled and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sink.spooled


def test_the_token_and_batches_reach_the_webapp_alone_and_an_impostor_gets_nothing(data_dir: Path) -> None:
    ensure_user(WEBAPP_USER, Path("/nonexistent"))
    port = free_port()
    env = up_env(data_dir)
    command = [readable_python(), "-m", "nettrail.cli", "up", "--port", str(port), "--no-collect"]
    up = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_line(up, f"webapp running at http://127.0.0.1:{port}/")
        account = pwd.getpwnam(WEBAPP_USER)
        token = run_as(account, env, "-m", "nettrail.cli", "token", "create", HOST).strip().splitlines()[-1]
        sink = local_sink(data_dir, token)
        sink.write(make_records(1, 50, host=HOST))
        assert sink.flush(WAIT)
        sink.close()
        assert (sink.stats.sent_records, sink.stats.spooled_batches) == (50, 0)
        assert sink.tracing[0] is True  # the webapp's answer, over its socket
    finally:
        up.send_signal(signal.SIGTERM)
        up.communicate(timeout=WAIT)
    assert up.returncode == 0  # the webapp is down from here on

    nobody = pwd.getpwnam("nobody")
    lair = Path(tempfile.mkdtemp(prefix="nettrail-impostor-"))
    os.chown(lair, nobody.pw_uid, nobody.pw_gid)
    own = lair / "webapp.sock"
    impostor = subprocess.Popen(
        [readable_python("nobody"), "-c", IMPOSTOR, str(port), str(own), str(data_dir / "webapp.sock")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, user=nobody.pw_uid, group=nobody.pw_gid,
        extra_groups=[],
    )  # fmt: skip
    sinks: list[HttpSink] = []
    try:
        assert impostor.stdout is not None
        assert impostor.stdout.readline().strip() == "ready Permission denied"  # not in the data directory
        # Its socket file given to the webapp's account (as if it had found a way to put one
        # there): the file passes, the process holding it does not. And a symlink to it.
        os.chown(own, account.pw_uid, account.pw_gid)
        (lair / "link.sock").symlink_to(own)
        sinks.append(local_sink(data_dir, token))  # the webapp's socket: nobody there
        for n, path in enumerate((own, lair / "link.sock")):
            sinks.append(
                HttpSink(f"unix:{path}", token, collector_dir_of(data_dir) / f"spool-{n}", server_user=WEBAPP_USER,
                         flush_interval=0.05)
            )  # fmt: skip
        for sink in sinks:
            sink.write(make_records(100, 10, host=HOST))
            wait_spooled(sink)
        got, _ = impostor.communicate("", timeout=WAIT)
    finally:
        for sink in sinks:
            sink.close(timeout=0.1)
        if impostor.poll() is None:
            impostor.kill()
            impostor.wait()
        shutil.rmtree(lair, ignore_errors=True)
    received = json.loads(got)
    assert received["tcp"] == []  # the old port: no connection at all
    # one connection (to its socket itself), checked and closed before a byte was written;
    # none through the symlink, which is refused unfollowed
    assert received["unix"] == [""]
    for sink in sinks:
        assert (sink.stats.sent_batches, sink.stats.spooled_batches) == (0, 1)
        assert sink.tracing == (False, None)  # no tracing answer to obey


def test_a_root_collector_shipping_plain_http_to_a_port_is_told_who_may_receive_its_token(
    stub: IngestStub, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="nettrail.sink.http"):
        HttpSink(stub.url, TOKEN, tmp_path / "spool").close()
    assert [r.getMessage() for r in caplog.records] == [PORT_HOLDER_WARNING % stub.url]
    assert TOKEN not in caplog.text

"""Collectors ship over HTTPS through a real TLS terminator (issue 19 item 7).

Debian's nginx, with a certificate from a CA this test makes with openssl, in front
of the scale-out ingest tier (`nettrail serve --workers 1 --writers 1`: daphne,
the Redis stream, a writer) running with NETTRAIL_HTTPS=1. The HTTP sink given the
CA (`ca_file`, `--ca-file`) delivers every record; without it the certificate is
refused and the batches wait in the spool; the backend itself sends plain-HTTP
clients to https://, and the proxied pages set only Secure, __Host- cookies. The
sink refuses to send a token over plain HTTP to another machine unless told
`--insecure`. Needs nginx, openssl and redis-server (scripts/install-system).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import requests
from capture_sample import write_capture
from ingest_stub import make_records
from redis_server import RedisServer
from tls_proxy import NGINX, Ca, TlsProxy, free_port, make_ca

from collector.sinks.http import HttpSink
from collector.sinks.http_transport import InsecureServerError, check_server_url
from nettrail.cli import main
from webapp.traces.models import KIND_MODELS

REPO = Path(__file__).resolve().parent.parent
HOST = "tls-host"
SPOOLED = "tls-spooled"
needs_tools = [
    pytest.mark.skipif(not Path(NGINX).exists(), reason="needs nginx (scripts/install-system)"),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl"),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]


@dataclass
class Stack:
    ca: Ca
    proxy: TlsProxy
    backend: int
    data: Path
    tokens: dict[str, str]

    def seqs(self, kind: str, host: str) -> list[int]:
        table = KIND_MODELS[kind]._meta.db_table
        with sqlite3.connect(self.data / "nettrail.sqlite3") as db:
            return [row[0] for row in db.execute(f"SELECT seq FROM {table} WHERE host_id = ? ORDER BY seq", (host,))]

    def wait_stored(self, kind: str, host: str, expected: int, seconds: float = 60.0) -> list[int]:
        """The seqs stored once `expected` rows are (200 means "in the stream": the writer stores it a moment later)."""
        deadline = time.monotonic() + seconds
        while True:
            got = self.seqs(kind, host)
            if len(got) >= expected or time.monotonic() > deadline:
                return got
            time.sleep(0.2)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    base = Path(tempfile.mkdtemp(prefix="nettrail-tls-"))  # not under pytest's 0700 tree:
    base.chmod(0o755)  # as root the cluster's children run as the nettrail user
    data = base / "data"
    redis_server = RedisServer()
    redis_server.start()
    backend = free_port()
    env = {**os.environ, "REDIS_URL": redis_server.url, "NETTRAIL_DATA": str(data), "NETTRAIL_HTTPS": "1"}
    env.update(NETTRAIL_TRIM_INTERVAL="0", ALLOWED_HOSTS="127.0.0.1,localhost", PYTHONDONTWRITEBYTECODE="1")
    for name in ("DATABASE_URL", "CHANNEL_LAYER"):
        env.pop(name, None)
    hosts = [HOST, SPOOLED, "lab.pcap"]
    setup = subprocess.run(
        [sys.executable, str(REPO / "tests" / "scale_out_setup.py"), *hosts],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=True,
    )  # fmt: skip
    tokens = dict(json.loads(setup.stdout.strip().splitlines()[-1])["tokens"])
    log = (base / "serve.log").open("wb")
    command = [
        sys.executable,
        "-m",
        "nettrail.cli",
        "serve",
        "--port",
        str(backend),
        "--workers",
        "1",
        "--writers",
        "1",
    ]
    serve = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    ca = make_ca(base / "ca")
    proxy = TlsProxy(base / "nginx", ca, backend)
    try:
        _wait_http(f"http://127.0.0.1:{backend}/accounts/login/", serve, base / "serve.log")
        proxy.start()
        yield Stack(ca, proxy, backend, data, tokens)
    finally:
        proxy.stop()
        children = psutil.Process(serve.pid).children(recursive=True)
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=60)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()
        for child in children:  # by PID: whatever the cluster did not stop
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        redis_server.close()
        shutil.rmtree(base, ignore_errors=True)


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            requests.get(url, timeout=2, allow_redirects=False)
            return
        except requests.RequestException:
            time.sleep(0.3)
    raise AssertionError("nettrail serve did not start:\n" + log.read_text())


def quick_sink(url: str, token: str, spool: Path, **kw: object) -> HttpSink:
    options: dict[str, object] = {"batch_size": 100, "flush_interval": 0.02, "timeout": 10.0, "retry_interval": 0.05}
    options.update(kw)
    return HttpSink(url, token, spool, **options)  # type: ignore[arg-type]


pytestmark = needs_tools


def test_the_sink_with_the_private_ca_delivers_every_record_through_nginx(stack: Stack, tmp_path: Path) -> None:
    sink = quick_sink(stack.proxy.url, stack.tokens[HOST], tmp_path / "spool", ca_file=stack.ca.ca_pem)
    for start in range(0, 1000, 125):
        sink.write(make_records(start, 125, host=HOST))
    sink.close(timeout=30.0)
    assert (sink.stats.sent_records, sink.stats.spooled_batches, sink.stats.rejected_batches) == (1000, 0, 0)
    assert stack.wait_stored("tcp_state", HOST, 1000) == list(range(1000))
    proxied = (stack.proxy.dir / "access.log").read_text()
    assert proxied.count('"POST /api/ingest HTTP/1.1" 200') == sink.stats.sent_batches


def test_without_the_ca_the_certificate_is_refused_and_the_batch_waits_in_the_spool(
    stack: Stack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="nettrail.sink.http"):
        sink = quick_sink(stack.proxy.url, stack.tokens[SPOOLED], tmp_path / "spool")
        sink.write(make_records(0, 10, host=SPOOLED))
        sink.close(timeout=0.3)
    assert (sink.stats.sent_batches, sink.stats.spooled_batches) == (0, 1)
    assert sink.spooled
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text
    # Spooled, not lost: the next sink on that spool, given the CA, delivers it.
    again = quick_sink(stack.proxy.url, stack.tokens[SPOOLED], tmp_path / "spool", ca_file=stack.ca.ca_pem)
    again.close(timeout=30.0)
    assert again.stats.replayed_batches == 1
    assert stack.wait_stored("tcp_state", SPOOLED, 10) == list(range(10))


def test_analyze_server_takes_ca_file_and_sends_by_ip_address(stack: Stack, tmp_path: Path) -> None:
    capture = write_capture(tmp_path / "lab.pcap")
    url = f"https://127.0.0.1:{stack.proxy.port}"  # the certificate names the address too
    args = ["analyze", str(capture), "--server", url, "--ca-file", str(stack.ca.ca_pem), "--libxo", "json"]
    args += ["--token", stack.tokens["lab.pcap"], "--spool", str(tmp_path / "spool")]
    assert main(args) == 0
    assert len(stack.wait_stored("connection", "lab.pcap", 2)) == 2


def test_behind_the_proxy_nettrail_https_makes_cookies_secure_and_plain_http_is_redirected(stack: Stack) -> None:
    page = requests.get(f"{stack.proxy.url}/accounts/login/", verify=str(stack.ca.ca_pem), timeout=10)
    assert page.status_code == 200
    assert page.headers["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains; preload"
    cookie = page.headers["Set-Cookie"]
    assert cookie.startswith("__Host-csrftoken=") and "; Secure" in cookie and "; Path=/" in cookie
    # The backend itself, reached without the proxy (no X-Forwarded-Proto), sends the client to https://.
    direct = requests.get(f"http://localhost:{stack.backend}/accounts/login/", allow_redirects=False, timeout=10)
    assert (direct.status_code, direct.headers["Location"]) == (
        301,
        f"https://localhost:{stack.backend}/accounts/login/",
    )


# --- no token in clear text over the network ---------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000",
        "http://127.9.9.9:8000",
        "http://[::1]:8000",
        "http://localhost:8000",
        "http://0.0.0.0:8000",
    ],
)
def test_plain_http_on_loopback_is_allowed(url: str) -> None:
    check_server_url(url)


def test_plain_http_to_an_address_of_this_machine_is_allowed() -> None:
    """`nettrail up --host ADDR` ships its collector's records to ADDR: they never leave the machine."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.10", 9))  # UDP: nothing is sent, the kernel only picks a route
            own = probe.getsockname()[0]
    except OSError:
        pytest.skip("no route off this machine: no non-loopback address to try")
    assert not ipaddress.ip_address(own).is_loopback
    check_server_url(f"http://{own}:8000")


@pytest.mark.parametrize("url", ["http://192.0.2.10:8000", "http://nettrail.example", "http://[2001:db8::1]/"])
def test_plain_http_to_another_machine_is_refused_unless_insecure(url: str) -> None:
    with pytest.raises(InsecureServerError) as refused:
        check_server_url(url)
    assert str(refused.value) == (
        f"--server {url}: refusing to send the host's token over plain HTTP to another machine; "
        "use https:// (with --ca-file for a private CA), or --insecure to send it in clear text anyway"
    )
    check_server_url(url, insecure=True)
    check_server_url(url.replace("http://", "https://"))


def test_the_sink_refuses_before_any_request(tmp_path: Path) -> None:
    with pytest.raises(InsecureServerError):
        HttpSink("http://192.0.2.10:8000", "T", tmp_path / "spool")
    assert not (tmp_path / "spool").exists() or not any((tmp_path / "spool").iterdir())
    with pytest.raises(ValueError, match=r"^--ca-file is for an https:// server, not http://127.0.0.1:1$"):
        HttpSink("http://127.0.0.1:1", "T", tmp_path / "spool", ca_file=tmp_path)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "NETTRAIL_TOKEN"}
    command = [sys.executable, "-m", "nettrail.cli", *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def test_collect_and_analyze_refuse_plain_http_to_another_machine_with_status_2(tmp_path: Path) -> None:
    message = (
        "--server http://192.0.2.10:8000: refusing to send the host's token over plain HTTP to another machine; "
        "use https:// (with --ca-file for a private CA), or --insecure to send it in clear text anyway"
    )
    collect = _cli("collect", "--server", "http://192.0.2.10:8000", "--token", "T", "--spool", str(tmp_path / "s"))
    assert (collect.returncode, collect.stderr.strip()) == (2, f"nettrail collect: {message}")
    capture = write_capture(tmp_path / "lab.pcap")
    analyze = _cli("analyze", str(capture), "--server", "http://192.0.2.10:8000", "--token", "T", "--libxo", "json")
    assert (analyze.returncode, analyze.stderr.strip()) == (2, f"nettrail: analyze: {message}")

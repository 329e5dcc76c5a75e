"""A throw-away CA (openssl) and Debian's nginx terminating TLS in front of a local backend, for tests.

`make_ca(dir)` writes a CA and a server certificate for ``localhost`` and
127.0.0.1 signed by it; `TlsProxy` runs ``nginx -g 'daemon off;'`` on a free
loopback port with that certificate, forwarding to ``127.0.0.1:<backend>`` with
``X-Forwarded-Proto: https`` (what the webapp's NETTRAIL_HTTPS=1 trusts) and
websocket upgrades. Everything lives in one temporary directory; nginx is stopped
by PID. Used by tests/test_ingest_tls.py; the deployment it imitates is in
docs/scale-out.md (TLS).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Ca:
    ca_pem: Path
    server_pem: Path
    server_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(directory: Path) -> Ca:
    """A CA valid for a day and a server certificate (localhost, 127.0.0.1) it signed."""
    directory.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=nettrail test CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    _openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost", cwd=directory)
    (directory / "server.ext").write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.pem", "-days", "1", "-extfile", "server.ext",
        cwd=directory,
    )  # fmt: skip
    return Ca(directory / "ca.pem", directory / "server.pem", directory / "server.key")


CONFIG = """\
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {dir}/access.log;
    client_body_temp_path {dir}/tmp/body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
    client_max_body_size 64m;
    map $http_upgrade $connection_upgrade {{ default upgrade; '' close; }}
    server {{
        listen 127.0.0.1:{port} ssl;
        server_name localhost;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        location / {{
            proxy_pass http://127.0.0.1:{backend};
            proxy_http_version 1.1;
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-Proto https;
            proxy_set_header X-Forwarded-For $remote_addr;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
        }}
    }}
}}
"""


class TlsProxy:
    """nginx with `ca`'s server certificate on a free port, forwarding to 127.0.0.1:`backend`."""

    def __init__(self, directory: Path, ca: Ca, backend: int) -> None:
        self.dir = directory
        self.ca = ca
        self.backend = backend
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://localhost:{self.port}"

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o755)  # nginx's workers (nobody) open the temp paths
        (self.dir / "tmp").mkdir(exist_ok=True)
        conf = self.dir / "nginx.conf"
        conf.write_text(
            CONFIG.format(
                dir=self.dir, port=self.port, backend=self.backend, cert=self.ca.server_pem, key=self.ca.server_key
            )
        )
        command = [NGINX, "-p", str(self.dir), "-e", str(self.dir / "error.log"), "-c", str(conf)]
        self.proc = subprocess.Popen([*command, "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx exited: {self.proc.stderr.read().decode() if self.proc.stderr else ''}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nginx did not listen")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()  # the master stops its workers
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

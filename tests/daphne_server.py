"""The real webapp (daphne via ``python -m webapp.serve``) in a subprocess, for tests over sockets.

A throw-away NETTRAIL_DATA is migrated, an admin, a viewer and a host token are made
through the ORM in a subprocess, and the server listens on a free loopback port. As
root it runs as ``nobody`` (the webapp refuses root), on an interpreter that user can
read. Used by tests/browser/conftest.py and the refuse-early and fuzz tests.
Keep in sync with: webapp/serve.py, webapp/traces/tokens.py.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
HOST = "browser-host"
ADMIN = ("admin", "browser-test-admin-pw")
VIEWER = ("viewer", "browser-test-viewer-pw")

SETUP = """
import django, sys
django.setup()
from django.contrib.auth import get_user_model
from webapp.traces.tokens import create_token
User = get_user_model()
User.objects.create_superuser(sys.argv[1], "", sys.argv[2])
User.objects.create_user(sys.argv[3], "", sys.argv[4])
print(create_token(sys.argv[5], "browser tests")[1])
"""


@dataclass
class Server:
    url: str
    token: str
    data_dir: Path
    pid: int = 0  # the daphne process (0: a copy naming another host's token on the same server)

    def ingest(self, records: list[Any]) -> dict[str, Any]:
        from translators.records import to_builtins

        body = json.dumps([to_builtins(r) for r in records])
        resp = requests.post(
            f"{self.url}/api/ingest",
            data=body,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            timeout=30,
        )
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def rchar(self) -> int:
        """Bytes the server process has read so far (files and sockets), from /proc/PID/io."""
        assert self.pid, "no server process"
        for line in Path(f"/proc/{self.pid}/io").read_text().splitlines():
            if line.startswith("rchar:"):
                return int(line.split()[1])
        raise AssertionError("no rchar in /proc/PID/io")

    def login(self, user: tuple[str, str] = ADMIN) -> requests.Session:
        """A requests session logged in through the login form (CSRF token included)."""
        session = requests.Session()
        session.get(f"{self.url}/accounts/login/", timeout=10)
        form = {"username": user[0], "password": user[1], "csrfmiddlewaretoken": session.cookies["csrftoken"]}
        resp = session.post(f"{self.url}/accounts/login/", data=form, timeout=10, allow_redirects=False)
        assert resp.status_code == 302, resp.text[:500]
        return session


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def manage_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CHANNEL_LAYER")}
    env.update(NETTRAIL_DATA=str(data_dir), DJANGO_SETTINGS_MODULE="webapp.settings", PYTHONPATH=str(ROOT))
    return env


def _drop_to(user: str) -> dict[str, Any]:
    if os.geteuid() != 0:
        return {}
    pw = pwd.getpwnam(user)
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}


@contextmanager
def running_webapp(extra_env: dict[str, str] | None = None, prefix: str = "nettrail-daphne-") -> Iterator[Server]:
    data_dir = Path(tempfile.mkdtemp(prefix=prefix))
    env = {**manage_env(data_dir), **(extra_env or {})}
    py = sys.executable
    subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    out = subprocess.run(
        [py, "-c", SETUP, *ADMIN, *VIEWER, HOST], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    )
    token = out.stdout.strip().splitlines()[-1]
    drop = _drop_to("nobody")
    if drop:
        for path in [data_dir, *data_dir.rglob("*")]:
            os.chown(path, drop["user"], drop["group"])
    server_py = py
    if drop:  # the webapp user may not reach a venv built on a Python under /root
        from nettrail.commands.up import _python_for_others

        server_py = _python_for_others(env)
    port = free_port()
    log = open(data_dir / "server.log", "w")  # noqa: SIM115 - closed after the server stops
    proc = subprocess.Popen(
        [server_py, "-m", "webapp.serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT, env={**env, "HOME": str(data_dir)}, stdout=log, stderr=subprocess.STDOUT, **drop,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):  # up to 30 s for daphne to listen (a loaded machine)
            if proc.poll() is not None:
                raise RuntimeError(f"webapp exited: {(data_dir / 'server.log').read_text()[-2000:]}")
            try:
                requests.get(f"{url}/accounts/login/", timeout=5)
                break
            except (requests.ConnectionError, requests.Timeout):
                time.sleep(0.1)
        else:
            raise RuntimeError("webapp did not start listening within 30 s")
        yield Server(url, token, data_dir, proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        print("--- webapp log (tail) ---\n" + (data_dir / "server.log").read_text()[-4000:])  # shown on failure
        shutil.rmtree(data_dir, ignore_errors=True)

"""The real webapp (daphne via ``python -m webapp.serve``) in a subprocess, for tests over sockets.

One helper for every test that needs a server: a throw-away NETTRAIL_DATA is
migrated, an admin, a viewer and a host token are made, and the server listens on a
free loopback port; it can be stopped, killed and started again on the same port and
data (``Server.stop``/``kill``/``start``). As root everything of the server's runs as
``nobody`` (the webapp refuses root) on an interpreter that user can run
(``readable_python``): like ``nettrail up``, the webapp never runs on another
interpreter than the one given. Used by tests/browser/conftest.py and the refuse-early,
live, spool and start-up window tests.
Keep in sync with: webapp/serve.py, webapp/traces/tokens.py, nettrail/commands/up.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
HOST = "browser-host"
ADMIN = ("admin", "browser-test-admin-pw")
VIEWER = ("viewer", "browser-test-viewer-pw")
SERVER_USER = "nobody"

SETUP = """
import django, sys
django.setup()
from django.contrib.auth import get_user_model
from webapp.traces.tokens import create_token
User = get_user_model()
User.objects.create_superuser(sys.argv[1], "", sys.argv[2])
User.objects.create_user(sys.argv[3], "", sys.argv[4])
print(create_token(sys.argv[5], "tests")[1])
"""
TOKEN = """
import django, sys
django.setup()
from webapp.traces.tokens import create_token
print(create_token(sys.argv[1], "tests")[1])
"""


def readable_python(user: str = SERVER_USER) -> str:
    """An interpreter with this environment's packages that `user` can run.

    This one when `user` can (nettrail up's own check); otherwise -- the test venv made
    from a pyenv Python under /root -- a venv of the system Python of the same version
    in a world-readable directory under /tmp, made once per checkout, whose site
    imports this venv's site-packages: an installation the user can read, as
    `nettrail up` asks for.
    """
    from nettrail.commands.up import WebappUnrunnable, webapp_python

    try:
        return webapp_python(pwd.getpwnam(user))
    except WebappUnrunnable:
        pass
    tag = hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]
    home = Path(tempfile.gettempdir()) / f"nettrail-test-python-{os.geteuid()}-{tag}"
    python = home / "bin" / "python"
    if not python.exists():
        building = Path(tempfile.mkdtemp(prefix=f"{home.name}-"))
        system_venv(building / "venv")
        building.chmod(0o755)
        try:
            (building / "venv").rename(home)
        except OSError:  # another test process made it first
            pass
        shutil.rmtree(building, ignore_errors=True)
    return str(python)


def system_venv(path: Path) -> Path:
    """A venv of /usr/bin/pythonX.Y at `path` that imports this environment's packages."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    system = Path(f"/usr/bin/python{version}")
    if not system.exists():
        raise RuntimeError(f"{system} is missing: the tests' server user needs a Python {version} it can run")
    subprocess.run([str(system), "-m", "venv", "--without-pip", str(path)], check=True)
    ours = [p for p in sys.path if p.startswith(sys.prefix) and p.endswith("site-packages")]
    site = next((path / "lib").glob("python*/site-packages"))
    # addsitedir, not a plain path line: the editable install's own .pth files must run too.
    lines = [f"import site; site.addsitedir({p!r})" for p in ours]
    (site / "nettrail-tests.pth").write_text("\n".join(lines) + "\n")
    return path / "bin" / "python"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def manage_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CHANNEL_LAYER", "REDIS_URL")}
    env.update(NETTRAIL_DATA=str(data_dir), DJANGO_SETTINGS_MODULE="webapp.settings", PYTHONPATH=str(ROOT),
               NETTRAIL_TRIM_INTERVAL="0", PYTHONDONTWRITEBYTECODE="1", HOME=str(data_dir))  # fmt: skip
    return env


def _drop_to(user: str) -> dict[str, Any]:
    if os.geteuid() != 0:
        return {}
    pw = pwd.getpwnam(user)
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}


@dataclass
class Server:
    url: str
    token: str
    data_dir: Path
    pid: int = 0  # the daphne process (0: a copy naming another host's token on the same server)
    env: dict[str, str] = field(default_factory=dict, repr=False)
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def run(self, *args: str) -> str:
        """`python ARGS` in the checkout, as the server's user, with its settings; its stdout."""
        done = subprocess.run([_python(), *args], cwd=ROOT, env=self.env, capture_output=True, text=True,
                              timeout=120, **_drop_to(SERVER_USER))  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"{args} failed: {done.stderr[-2000:]}")
        return done.stdout

    def make_token(self, host: str) -> str:
        return self.run("-c", TOKEN, host).strip().splitlines()[-1]

    def start(self) -> None:
        """Start (again) on the same port and data; returns once it answers."""
        log = open(self.data_dir / "server.log", "a")  # noqa: SIM115 - the child holds it; closed below
        self.proc = subprocess.Popen(
            [_python(), "-m", "webapp.serve", "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, **_drop_to(SERVER_USER),
        )  # fmt: skip
        log.close()
        self.pid = self.proc.pid
        for _ in range(600):  # up to 60 s for daphne to listen (a loaded machine)
            if self.proc.poll() is not None:
                raise RuntimeError(f"webapp exited: {self.log()[-2000:]}")
            try:
                requests.get(f"{self.url}/accounts/login/", timeout=5)
                return
            except (requests.ConnectionError, requests.Timeout):
                time.sleep(0.1)
        raise RuntimeError("webapp did not start listening within 60 s")

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, in-flight requests die."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc = None

    def log(self) -> str:
        path = self.data_dir / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

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

    def session_cookie(self, user: tuple[str, str] = ADMIN) -> str:
        """A `Cookie` header value of a fresh login (for websocket clients)."""
        return f"sessionid={self.login(user).cookies['sessionid']}"


def _python() -> str:
    return readable_python() if _drop_to(SERVER_USER) else sys.executable


@contextmanager
def running_webapp(
    extra_env: dict[str, str] | None = None, prefix: str = "nettrail-daphne-", host: str = HOST
) -> Iterator[Server]:
    """A migrated server with ADMIN, VIEWER and a token for `host`, stopped and removed on exit."""
    # Under /tmp itself, not pytest's private tmp_path: the server's user must reach it.
    data_dir = Path(tempfile.mkdtemp(prefix=prefix))
    drop = _drop_to(SERVER_USER)
    if drop:
        os.chown(data_dir, drop["user"], drop["group"])
    server = Server(f"http://127.0.0.1:{free_port()}", "", data_dir, env={**manage_env(data_dir), **(extra_env or {})})
    try:
        server.run("manage.py", "migrate", "-v0")
        server.token = server.run("-c", SETUP, *ADMIN, *VIEWER, host).strip().splitlines()[-1]
        server.start()
        yield server
    finally:
        server.stop()
        print("--- webapp log (tail) ---\n" + server.log()[-4000:])  # shown on failure
        shutil.rmtree(data_dir, ignore_errors=True)

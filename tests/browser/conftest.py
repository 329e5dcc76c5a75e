"""Browser-test harness: the real webapp (daphne via ``python -m webapp.serve``) in a
subprocess on a free port with a throw-away NETTRAIL_DATA, users and a host token made
through the ORM in a subprocess, and Debian's Chromium driven by Playwright (sync API).

As root the server runs as ``nobody`` (the webapp refuses root); the data directory is
handed to that user. No browser is downloaded: Playwright launches /usr/bin/chromium.
Screenshots go to artifacts/screenshots/ (gitignored).
Keep in sync with: webapp/serve.py, webapp/traces/tokens.py, tests/browser/dashboard_batch.py.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
HOST = "browser-host"
ADMIN = ("admin", "browser-test-admin-pw")
VIEWER = ("viewer", "browser-test-viewer-pw")
UPLOT = ROOT / "webapp/dashboard/static/dashboard/vendor/uplot/uPlot.iife.min.js"
# Counts the pixels of the plot canvas (inside the element with this id) close to one
# colour: a series' stroke, so grid lines and axes (drawn on the same canvas) do not count.
PAINTED = """([id, hex]) => {
  const c = document.querySelector('#' + id + ' canvas');
  if (!c || !c.width || !c.height) return 0;
  const want = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
  const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < px.length; i += 4) {
    if (px[i + 3] > 128 && Math.abs(px[i] - want[0]) < 40 && Math.abs(px[i + 1] - want[1]) < 40 && Math.abs(px[i + 2] - want[2]) < 40) n++;
  }
  return n;
}"""


@dataclass
class Server:
    url: str
    token: str
    data_dir: Path

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _manage_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CHANNEL_LAYER")}
    env.update(NETTRAIL_DATA=str(data_dir), DJANGO_SETTINGS_MODULE="webapp.settings", PYTHONPATH=str(ROOT))
    return env


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


def _drop_to(user: str) -> dict[str, Any]:
    if os.geteuid() != 0:
        return {}
    pw = pwd.getpwnam(user)
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}


@pytest.fixture(scope="package")
def server() -> Iterator[Server]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (Debian package chromium; scripts/install-system installs it)")
    if not UPLOT.exists():
        pytest.fail("uPlot is not installed: run scripts/js-env (scripts/test does)")
    data_dir = Path(tempfile.mkdtemp(prefix="nettrail-browser-"))
    env = _manage_env(data_dir)
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
    port = _free_port()
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
                requests.get(f"{url}/accounts/login/", timeout=1)
                break
            except (requests.ConnectionError, requests.ReadTimeout):
                # ReadTimeout: listening, but the first request (Django loading its URLconf)
                # took over a second on a loaded machine; ask again within the same 30 s.
                time.sleep(0.1)
        else:
            raise RuntimeError("webapp did not start listening within 30 s")
        yield Server(url, token, data_dir)
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


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


def log_in(page: Any, base: str, user: tuple[str, str]) -> None:
    page.goto(f"{base}/accounts/login/")
    page.fill("#id_username", user[0])
    page.fill("#id_password", user[1])
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")


@pytest.fixture(scope="package")
def admin_state(server: Server, browser: Any) -> dict[str, Any]:
    """Cookies of a logged-in admin, reused by every test's fresh context."""
    context = browser.new_context()
    page = context.new_page()
    log_in(page, server.url, ADMIN)
    state: dict[str, Any] = context.storage_state()
    context.close()
    return state


@pytest.fixture()
def page(server: Server, browser: Any, admin_state: dict[str, Any]) -> Iterator[Any]:
    context = browser.new_context(
        storage_state=admin_state, viewport={"width": 1366, "height": 900}, accept_downloads=True
    )
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    context.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"


def screenshot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


@pytest.fixture(scope="package")
def ingested(server: Server) -> Any:
    """One connection's recorded life, ingested once for the tests that only read it."""
    from .dashboard_batch import build

    batch = build(HOST, sport=40100, cookie=100)
    result = server.ingest(batch.records)
    assert result == {"stored": len(batch.records), "duplicates": 0}
    return batch

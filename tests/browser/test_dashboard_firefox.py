"""The dashboard in Firefox (issue 7, item 7): Debian's Firefox ESR driven over WebDriver
BiDi (tests/browser/bidi.py) against the same real server and ingested batch as the
Chromium tests. Log in; the connections page lists the ingested connection; its detail
page shows the state timeline in order and every chart paints its canvas; the live table
receives a newly ingested connection without a reload.
Keep in sync with: tests/browser/conftest.py (fixtures), test_dashboard_connection_detail.py
(chart ids and colours), webapp/dashboard templates (selectors).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .bidi import Bidi, Tab
from .conftest import ADMIN, HOST, PAINTED, SCREENSHOTS, Server
from .dashboard_batch import STATES, build
from .test_dashboard_connection_detail import CHARTS

pytestmark = pytest.mark.browser

FIREFOX = shutil.which("firefox-esr")
# A quiet, offline profile: no first-run pages, updates, telemetry or background fetches.
USER_JS = """
user_pref("remote.prefs.recommended", true);
user_pref("app.update.enabled", false);
user_pref("app.update.auto", false);
user_pref("browser.shell.checkDefaultBrowser", false);
user_pref("browser.startup.homepage_override.mstone", "ignore");
user_pref("browser.aboutwelcome.enabled", false);
user_pref("datareporting.policy.dataSubmissionEnabled", false);
user_pref("datareporting.healthreport.uploadEnabled", false);
user_pref("toolkit.telemetry.enabled", false);
user_pref("network.captive-portal-service.enabled", false);
user_pref("network.connectivity-service.enabled", false);
user_pref("browser.safebrowsing.malware.enabled", false);
user_pref("browser.safebrowsing.phishing.enabled", false);
user_pref("browser.safebrowsing.downloads.enabled", false);
user_pref("browser.safebrowsing.blockedURIs.enabled", false);
user_pref("extensions.update.enabled", false);
user_pref("extensions.getAddons.cache.enabled", false);
user_pref("services.settings.server", "http://127.0.0.1:9/");
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def firefox() -> Iterator[Bidi]:
    """A headless Firefox ESR with a fresh profile and one BiDi session; killed by PID."""
    if FIREFOX is None:
        pytest.skip("firefox-esr is missing (Debian package firefox-esr; scripts/install-system installs it)")
    profile = Path(tempfile.mkdtemp(prefix="nettrail-firefox-"))
    (profile / "user.js").write_text(USER_JS)
    port = _free_port()
    log = open(profile / "firefox.log", "w")  # noqa: SIM115 - closed in the finaliser
    proc = subprocess.Popen(
        [FIREFOX, "--headless", "--no-remote", "--remote-debugging-port", str(port), "--profile", str(profile)],
        env={"HOME": str(profile), "PATH": "/usr/bin:/bin", "MOZ_CRASHREPORTER_DISABLE": "1"},
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    bidi = None
    try:
        for _ in range(300):  # up to 30 s for BiDi to listen (a loaded machine)
            if proc.poll() is not None:
                raise RuntimeError(f"firefox exited: {(profile / 'firefox.log').read_text()[-2000:]}")
            try:
                bidi = Bidi(f"ws://127.0.0.1:{port}/session")
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError("firefox did not open its BiDi port within 30 s")
        bidi.send("session.new", {"capabilities": {}})
        bidi.send("session.subscribe", {"events": ["log.entryAdded"]})  # uncaught page errors
        yield bidi
    finally:
        if bidi is not None:
            bidi.close()
        proc.kill()
        proc.wait(timeout=10)
        log.close()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def logged_in(server: Server, firefox: Bidi) -> Iterator[Tab]:
    """One tab, logged in as the admin through the real login form."""
    tab = Tab(firefox, firefox.send("browsingContext.create", {"type": "tab"})["context"])
    tab.navigate(f"{server.url}/accounts/login/")
    tab.call(
        """(user, pw) => {
          document.querySelector('#id_username').value = user;
          document.querySelector('#id_password').value = pw;
          document.querySelector('button[type=submit]').click();
        }""",
        *ADMIN,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the form posts and redirects to the overview
        try:
            if tab.call("() => [location.pathname, document.readyState]") == ["/", "complete"]:
                break
        except Exception:  # the page is between documents  # noqa: BLE001
            pass
        time.sleep(0.1)
    else:
        pytest.fail("logging in did not land on the overview within 10 s")
    yield tab


@pytest.fixture(autouse=True)
def no_page_errors(firefox: Bidi) -> Iterator[None]:
    """Fails a test during which a page threw an uncaught JavaScript error."""
    before = len(firefox.page_errors())
    yield
    assert firefox.page_errors()[before:] == [], "JavaScript errors on the page in Firefox"


def _shot(tab: Tab, name: str) -> None:
    tab.screenshot(SCREENSHOTS / f"firefox-{name}.png")


def test_firefox_logs_in_and_lists_the_ingested_connection(server: Server, logged_in: Tab, ingested: Any) -> None:
    tab = logged_in
    tab.navigate(f"{server.url}/connections/")
    tab.wait_for(f"document.querySelector('#conns tbody tr[data-uuid=\"{ingested.uuid}\"]')")
    row = tab.call(
        """(uuid) => {
          const r = document.querySelector(`#conns tbody tr[data-uuid="${uuid}"]`);
          return { state: r.querySelector('[data-col="state"]').textContent, text: r.innerText };
        }""",
        ingested.uuid,
    )
    assert row["state"] == "CLOSED"
    assert "127.0.0.1:40100" in row["text"]
    _shot(tab, "connections")


def test_firefox_shows_the_timeline_in_order_and_paints_every_chart(
    server: Server, logged_in: Tab, ingested: Any
) -> None:
    tab = logged_in
    tab.navigate(f"{server.url}/connections/{ingested.uuid}/")
    tab.wait_for("document.body.dataset.loaded === '1'", timeout_ms=10000)
    states = tab.call("() => [...document.querySelectorAll('#timeline li.state')].map((e) => e.dataset.state)")
    assert states == list(STATES)
    for chart, colour in CHARTS.items():
        painted = tab.call(PAINTED, [chart, colour])
        assert painted > 100, f"{chart} has no {colour} series drawn in Firefox"
    _shot(tab, "connection-detail")


def test_firefox_live_table_receives_a_new_connection_without_reload(server: Server, logged_in: Tab) -> None:
    tab = logged_in
    tab.navigate(f"{server.url}/connections/")
    tab.wait_for(f"(document.body.dataset.liveGroups || '').split(' ').includes('host.{HOST}')")
    tab.call("() => { window.__ntNoReload = true; }")  # lost if the page reloaded
    batch = build(HOST, sport=40900, cookie=900)
    server.ingest(batch.records)
    selector = f'#conns tbody tr[data-uuid="{batch.uuid}"] [data-col="state"]'
    tab.wait_for(f"document.querySelector('{selector}')?.textContent === 'CLOSED'", timeout_ms=5000)
    assert tab.call("() => window.__ntNoReload === true")
    assert tab.call("(s) => document.querySelectorAll(s).length", f'#conns tbody tr[data-uuid="{batch.uuid}"]') == 1
    _shot(tab, "live")

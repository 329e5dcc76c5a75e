"""Login throttling (django-axes, webapp/settings.py): failures count per user name across
addresses and per address across user names (issue 33 item 5), through the real login
form, the real AxesMiddleware and the database handler, with each client's address set
as the server sees it (REMOTE_ADDR). Documented in docs/webapp.md, "Login throttling".
"""

# ruff: noqa: F811 -- pytest fixtures imported from webapp_cast are redefined as test arguments

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.test import Client
from django.utils import timezone
from webapp_cast import ADMIN_PASSWORD, VIEWER_PASSWORD, Cast, cast  # noqa: F401 (cast is a fixture)

pytestmark = pytest.mark.django_db
LOCKED = 429


def log_in(address: str, username: str, password: str) -> int:
    """One login from `address`, in a fresh client (no cookie carries over between tries)."""
    client = Client(REMOTE_ADDR=address)
    resp = client.post("/accounts/login/", {"username": username, "password": password})
    if resp.status_code == 302:
        assert client.session["_auth_user_id"]
    return int(resp.status_code)


def test_the_limit_is_five_wrong_passwords_in_fifteen_minutes_by_default() -> None:
    assert settings.AXES_FAILURE_LIMIT == 5
    assert settings.AXES_COOLOFF_TIME == timedelta(minutes=15)
    assert settings.AXES_LOCKOUT_PARAMETERS == [["username"], ["ip_address"]]


def test_five_failures_from_one_address_lock_the_user_out_from_another_address_too(cast: Cast) -> None:
    assert [log_in("127.0.0.1", "admin", f"wrong-{i}") for i in range(5)] == [200] * 4 + [LOCKED]
    assert log_in("127.0.0.2", "admin", ADMIN_PASSWORD) == LOCKED
    assert log_in("::1", "admin", ADMIN_PASSWORD) == LOCKED
    assert log_in("127.0.0.3", "viewer", VIEWER_PASSWORD) == 302  # another name, another address


def test_failures_from_five_addresses_add_up_for_one_user(cast: Cast) -> None:
    addresses = ["127.0.0.1", "127.0.0.2", "127.0.0.3", "::1", "fe80::1"]
    assert [log_in(a, "admin", "wrong") for a in addresses] == [200] * 4 + [LOCKED]
    assert log_in("127.0.0.9", "admin", ADMIN_PASSWORD) == LOCKED


def test_five_failures_from_one_address_lock_that_address_out_for_every_user_name(cast: Cast) -> None:
    names = ["admin", "viewer", "root", "nobody", "guest"]
    assert [log_in("127.0.0.2", n, "wrong") for n in names] == [200] * 4 + [LOCKED]
    assert log_in("127.0.0.2", "viewer", VIEWER_PASSWORD) == LOCKED
    assert log_in("127.0.0.1", "viewer", VIEWER_PASSWORD) == 302  # the user itself is not locked


def test_another_users_successful_login_does_not_clear_the_failures_against_admin(cast: Cast) -> None:
    assert [log_in("127.0.0.1", "admin", "wrong") for _ in range(4)] == [200] * 4
    assert log_in("127.0.0.1", "viewer", VIEWER_PASSWORD) == 302  # the address has 4: not locked yet
    assert log_in("127.0.0.2", "admin", "wrong") == LOCKED  # admin's fifth, still counted


def test_a_lockout_ends_the_lockout_time_after_the_last_try_and_a_try_meanwhile_restarts_it(cast: Cast) -> None:
    assert [log_in("127.0.0.1", "admin", "wrong") for _ in range(5)] == [200] * 4 + [LOCKED]
    cooloff = settings.AXES_COOLOFF_TIME
    AccessAttempt.objects.update(attempt_time=timezone.now() - cooloff + timedelta(minutes=1))
    assert log_in("127.0.0.1", "admin", ADMIN_PASSWORD) == LOCKED  # a minute left, and this try restarts it
    attempt = AccessAttempt.objects.get()
    assert (attempt.username, attempt.ip_address, attempt.failures_since_start) == ("admin", "127.0.0.1", 6)
    assert attempt.attempt_time > timezone.now() - timedelta(minutes=1)
    AccessAttempt.objects.update(attempt_time=timezone.now() - cooloff - timedelta(seconds=1))
    assert log_in("127.0.0.1", "admin", ADMIN_PASSWORD) == 302

"""`nettrail up`'s first-run set-up: admin created once, local token renewed each start."""

from __future__ import annotations

import logging

import pytest
from django.contrib.auth import get_user_model

from nettrail.commands import up
from webapp.traces.models import IngestToken
from webapp.traces.tokens import authenticate, create_token

pytestmark = pytest.mark.django_db


def test_the_admin_is_created_once_with_a_generated_password(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.delenv("NETTRAIL_ADMIN_PASSWORD", raising=False)
    password = up._ensure_admin()
    assert password is not None and len(password) >= 16
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser and admin.check_password(password)
    assert up._ensure_admin() is None  # second start: nothing new to print
    assert get_user_model().objects.count() == 1
    assert password not in caplog.text


def test_a_given_admin_password_is_used_and_never_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETTRAIL_ADMIN_PASSWORD", "given-Pw-5512-long")
    assert up._ensure_admin() is None
    assert get_user_model().objects.get(username="admin").check_password("given-Pw-5512-long")


def test_each_start_replaces_the_local_token_and_keeps_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETTRAIL_HOST_ID", "appliance")
    _, manual = create_token("appliance", label="spare")
    first = up._renew_local_token()
    second = up._renew_local_token()
    assert authenticate(first) is None
    row = authenticate(second)
    assert row is not None and (row.host.name, row.label) == ("appliance", up.LOCAL_TOKEN_LABEL)
    assert authenticate(manual) is not None
    assert IngestToken.objects.count() == 2

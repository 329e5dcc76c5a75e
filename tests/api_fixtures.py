"""Fixtures of the read-API tests (loaded with `pytest_plugins = ["api_fixtures"]`): the cast of api_cast.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from api_cast import alpha_records, beta_records
from django.contrib.auth import get_user_model
from django.test import Client

from webapp.traces.models import Host
from webapp.traces.store import store_batch


@pytest.fixture
def cast(db: None) -> None:
    Host.objects.create(name="alpha")
    Host.objects.create(name="beta")
    store_batch(alpha_records())
    store_batch(beta_records())


@pytest.fixture
def viewer_client(db: None) -> Iterator[Client]:
    client = Client()
    client.force_login(get_user_model().objects.create_user("viewer", password="viewer-password-1"))
    yield client

"""A fresh PostgreSQL database per scale-out test, dropped afterwards (tests/test_scale_out.py and the bus crash tests).

Made on the server of NETTRAIL_TEST_POSTGRES_URL (`. scripts/test-services`); the
cluster under test migrates it (tests/scale_out_setup.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

PG_URL = os.environ.get("NETTRAIL_TEST_POSTGRES_URL", "")


@pytest.fixture
def database() -> Iterator[str]:
    import psycopg

    name = f"nettrail_scale_{os.getpid()}"
    base = PG_URL.rsplit("/", 1)[0]
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield f"{base}/{name}"
    finally:
        drop_database(name)


def drop_database(name: str) -> None:
    """Drop the test's database once nothing uses it. A plain DROP makes autovacuum's
    workers leave by itself, where FORCE refuses to end one without pg_signal_backend
    (a CI run's teardown failed so, after this test's writes woke autovacuum); it is
    retried while the test's own processes go, FORCE only as the last attempt."""
    import psycopg

    deadline = time.monotonic() + 30
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        while time.monotonic() < deadline:
            try:
                admin.execute(f"DROP DATABASE IF EXISTS {name}")
                return
            except psycopg.errors.ObjectInUse:  # waited 5 s in the server for other sessions
                time.sleep(0.5)
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

"""Shared helpers of the Django benchmarks: Django set up on a throw-away SQLite data
directory (bench_api_pages.py, bench_dashboard_pages.py, bench_report.py) or, for the two
page benchmarks given --postgres URL, on a PostgreSQL database of their own (Django's test
database of that URL, kept between runs with its rows), and for the two page benchmarks a
Connection table filled in bulk, a logged-in test client, a page request that checks its
answer, and the median timer.
Not a benchmark itself (bench/run.py runs only bench_*.py).
Keep in sync with: webapp/settings.py (NETTRAIL_DATA, DATABASE_URL), docs/benchmarks.md.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BATCH = 5000  # rows per bulk_create
REPEAT = 7


def setup(data_dir: str, postgres: str | None = None, bench: str = "bench") -> None:
    """Django on SQLite in data_dir (a DATABASE_URL in the environment is ignored), or on
    PostgreSQL: `postgres` is a postgres:// URL; the run uses the database test_<its
    name>_<bench> beside it, created and migrated when missing, kept afterwards with its
    rows (drop it by hand)."""
    os.environ["NETTRAIL_DATA"] = data_dir
    if postgres:
        os.environ["DATABASE_URL"] = postgres
    else:
        os.environ.pop("DATABASE_URL", None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "webapp.settings"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    if postgres:
        from django.db import connection

        test = connection.settings_dict.setdefault("TEST", {})
        test["NAME"] = f"test_{connection.settings_dict['NAME']}_{bench}"
        connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False, keepdb=True)


def is_postgres() -> bool:
    from django.db import connection

    return connection.vendor == "postgresql"


def stored() -> int:
    """Connection rows already there (a kept PostgreSQL database, or --data's SQLite file)."""
    from django.core.management import call_command

    from webapp.traces.models import Connection

    call_command("migrate", verbosity=0, interactive=False)
    return Connection.objects.count()


def populate(count: int, make: Callable[[int], Any]) -> None:
    """Migrate, then store make(0) ... make(count - 1) (unsaved Connection rows) in bulk."""
    from django.core.management import call_command

    from webapp.traces.models import Connection

    call_command("migrate", verbosity=0, interactive=False)
    rows = []
    for i in range(count):
        rows.append(make(i))
        if len(rows) >= BATCH:
            Connection.objects.bulk_create(rows)
            rows.clear()
    Connection.objects.bulk_create(rows)
    if is_postgres():
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {Connection._meta.db_table}")  # as autovacuum would have


def logged_in_client() -> Any:
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client(HTTP_HOST="127.0.0.1")
    user, _ = get_user_model().objects.get_or_create(username="bench")
    client.force_login(user)
    return client


def page_request(client: Any, url: str, rows_key: str, limit: int) -> Callable[..., Callable[[], None]]:
    """get(**params) -> a call that requests one page of `limit` rows and checks it is full."""

    def get(**params: Any) -> Callable[[], None]:
        def call() -> None:
            resp = client.get(url, {"limit": limit, **params})
            assert resp.status_code == 200, resp.content
            assert len(resp.json()[rows_key]) == limit

        return call

    return get


def timed(fn: Callable[[], Any]) -> float:
    """Median milliseconds of REPEAT calls (after one warm-up)."""
    fn()
    samples = []
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)

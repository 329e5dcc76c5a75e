"""Settings come from the environment through strict helpers; bad values stop start-up."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db.backends.sqlite3.base import DatabaseWrapper

from webapp import datadir
from webapp.env import (
    env_bool,
    env_channel_layer,
    env_database,
    env_hosts,
    env_int,
    env_origins,
    env_secret_key,
)

REPO = Path(__file__).resolve().parents[1]
HTTPS_ONLY_WARNINGS = ["security.W004", "security.W008", "security.W012", "security.W016"]


@pytest.mark.parametrize(
    ("reader", "value", "message"),
    [
        (lambda e: env_bool("NETTRAIL_DEBUG", False, env=e), "maybe", "NETTRAIL_DEBUG='maybe': expected one of"),
        (lambda e: env_int("NETTRAIL_RETENTION_DAYS", 30, env=e), "ten", "expected a whole number"),
        (lambda e: env_int("NETTRAIL_RETENTION_DAYS", 30, env=e), "-1", "must be at least 0"),
        (lambda e: env_hosts("ALLOWED_HOSTS", [], env=e), "http://example.org", "is not a host name"),
        (lambda e: env_hosts("ALLOWED_HOSTS", [], env=e), "a.org,,b.org", "'' is not a host name"),
        (lambda e: env_hosts("ALLOWED_HOSTS", [], env=e), "a b", "is not a host name"),
        (lambda e: env_secret_key("SECRET_KEY", env=e), "short", "at least 50 characters"),
        (lambda e: env_secret_key("SECRET_KEY", env=e), "a" * 60, "at least 5 distinct"),
        (
            lambda e: env_database("DATABASE_URL", "/x.db", env=e),
            "mysql://u@h/db",
            "expected sqlite:///PATH or postgres://",
        ),
        (lambda e: env_database("DATABASE_URL", "/x.db", env=e), "postgres://u@h:5432/", "names no database"),
        (lambda e: env_channel_layer("CHANNEL_LAYER", env=e), "kafka", "expected 'memory' or redis://"),
        (lambda e: env_channel_layer("CHANNEL_LAYER", env=e), "redis://", "expected 'memory' or redis://"),
        (lambda e: env_origins("CSRF_TRUSTED_ORIGINS", env=e), "example.org", "is not an origin"),
    ],
)
def test_it_rejects_bad_values_naming_the_variable(reader: object, value: str, message: str) -> None:
    names = ("NETTRAIL_DEBUG", "NETTRAIL_RETENTION_DAYS", "ALLOWED_HOSTS", "SECRET_KEY", "DATABASE_URL", "CHANNEL_LAYER",
             "CSRF_TRUSTED_ORIGINS")  # fmt: skip
    with pytest.raises(ImproperlyConfigured, match=message) as info:
        reader({name: value for name in names})  # type: ignore[operator]
    assert str(info.value).startswith(names)  # the message starts with the variable's name


def test_it_parses_good_values() -> None:
    assert env_bool("X", False, env={"X": "Yes"}) is True
    assert env_bool("X", True, env={}) is True
    assert env_int("X", 1, env={"X": " 42 "}) == 42
    assert env_hosts("X", [], env={"X": "nettrail.example.org, 127.0.0.1,[::1],.example.com"}) == [
        "nettrail.example.org", "127.0.0.1", "[::1]", ".example.com",
    ]  # fmt: skip
    assert env_channel_layer("X", env={}) == {"BACKEND": "channels.layers.InMemoryChannelLayer"}
    assert env_channel_layer("X", env={"X": "redis://127.0.0.1:6391/0"}) == {
        "BACKEND": "webapp.bus.layer.ResilientRedisChannelLayer",
        "CONFIG": {"hosts": ["redis://127.0.0.1:6391/0"]},
    }
    pg = env_database("X", "/x.db", env={"X": "postgres://u:p@db.example:5433/nt"})
    assert (pg["ENGINE"], pg["NAME"], pg["HOST"], pg["PORT"]) == (
        "django.db.backends.postgresql",
        "nt",
        "db.example",
        5433,
    )
    assert env_database("X", "/var/x.db", env={})["NAME"] == "/var/x.db"
    assert env_origins("X", env={"X": "https://a.example,http://127.0.0.1:8000"}) == [
        "https://a.example",
        "http://127.0.0.1:8000",
    ]


def run_settings(tmp_path: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SECRET_KEY", "DJANGO_SETTINGS_MODULE")}
    full = {**base, "NETTRAIL_DATA": str(tmp_path / "data"), "DJANGO_SETTINGS_MODULE": "webapp.settings", **env}
    return subprocess.run([sys.executable, "-c", code], env=full, cwd=REPO, capture_output=True, text=True, timeout=60)


def test_the_server_refuses_to_start_with_a_bad_value(tmp_path: Path) -> None:
    proc = run_settings(tmp_path, "import django; django.setup()", ALLOWED_HOSTS="http://nettrail.example.org")
    assert proc.returncode == 1
    assert "ImproperlyConfigured: ALLOWED_HOSTS='http://nettrail.example.org'" in proc.stderr


def test_check_deploy_warns_only_about_https_only_settings(tmp_path: Path) -> None:
    code = "import django; django.setup(); from django.core.management import call_command; call_command('check', deploy=True)"
    plain = run_settings(tmp_path, code)
    assert plain.returncode == 0, plain.stderr
    assert sorted(set(re.findall(r"\((security\.\w+)\)", plain.stderr))) == HTTPS_ONLY_WARNINGS
    https = run_settings(tmp_path, code, NETTRAIL_HTTPS="1")
    assert (https.returncode, https.stderr) == (0, "")
    assert "System check identified no issues" in https.stdout


def test_the_secret_key_is_generated_once_with_mode_0600(tmp_path: Path) -> None:
    key = datadir.load_or_create_secret_key(tmp_path)
    path = tmp_path / datadir.SECRET_KEY_FILE
    assert len(key) >= 60
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert datadir.load_or_create_secret_key(tmp_path) == key
    assert [p.name for p in tmp_path.iterdir()] == [datadir.SECRET_KEY_FILE]


def test_the_data_directory_comes_from_nettrail_data_or_a_documented_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETTRAIL_DATA", "/srv/nettrail")
    assert datadir.data_dir() == Path("/srv/nettrail")
    monkeypatch.delenv("NETTRAIL_DATA")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert datadir.data_dir() == Path("/var/lib/nettrail")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_DATA_HOME", "/home/u/.data")
    assert datadir.data_dir() == Path("/home/u/.data/nettrail")


def test_the_test_run_uses_a_temporary_data_directory() -> None:
    assert Path(settings.DATA_DIR).name.startswith("nettrail-test-data-") or "NETTRAIL_DATA" in os.environ
    assert Path(settings.DATA_DIR) != datadir.SYSTEM_DATA_DIR


def test_sqlite_databases_open_in_wal_mode(tmp_path: Path, django_db_blocker: Any) -> None:
    options = settings.DATABASES["default"].get("OPTIONS", {})
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3":
        pytest.skip("this run uses PostgreSQL (DATABASE_URL); WAL is SQLite's")
    params = {**settings.DATABASES["default"], "NAME": str(tmp_path / "wal.sqlite3"), "OPTIONS": options}
    wrapper = DatabaseWrapper(params, alias="wal-check")
    with django_db_blocker.unblock():
        with wrapper.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode")
            assert cursor.fetchone() == ("wal",)
            cursor.execute("PRAGMA synchronous")
            assert cursor.fetchone() == (1,)  # NORMAL
        wrapper.close()

"""`nettrail token create|list|revoke`: tokens printed once, stored as sha256 only."""

# ruff: noqa: F811 -- pytest fixtures imported from webapp_cast are redefined as test arguments

from __future__ import annotations

import hashlib

import pytest
from django.db import connection
from django.test import Client
from webapp_cast import Cast, cast, post, retransmit  # noqa: F401 (cast is a fixture)

from nettrail.cli import main as nettrail
from webapp.traces.models import Host, IngestToken

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def create(capsys: pytest.CaptureFixture[str], host: str) -> str:
    assert nettrail(["token", "create", host]) == 0
    out = capsys.readouterr()
    assert "shown once" in out.err
    return out.out.strip()


def every_stored_value() -> str:
    dump = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            dump.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(dump)


def test_it_prints_a_new_token_once_and_stores_only_its_hash(capsys: pytest.CaptureFixture[str]) -> None:
    raw = create(capsys, "web-1")
    assert raw.startswith("nt_") and len(raw) == 46
    row = IngestToken.objects.get()
    assert (row.host.name, row.prefix, row.digest) == ("web-1", raw[:12], hashlib.sha256(raw.encode()).hexdigest())
    stored = every_stored_value()
    assert raw not in stored
    assert raw[12:] not in stored  # nothing beyond the prefix is kept in clear
    assert Host.objects.filter(name="web-1").count() == 1


def test_a_created_token_writes_records_for_its_host(capsys: pytest.CaptureFixture[str]) -> None:
    raw = create(capsys, "web-1")
    assert post(Client(), raw, [retransmit("web-1", 1)]).json() == {"stored": 1, "duplicates": 0, "tracing": None}


def test_it_lists_prefixes_and_hosts_but_never_tokens(cast: Cast, capsys: pytest.CaptureFixture[str]) -> None:
    assert nettrail(["token", "list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["PREFIX", "HOST", "CREATED", "LAST", "USED", "LABEL"]
    assert [line.split()[:2] for line in lines[1:]] == [[cast.token_a[:12], "host-a"], [cast.token_b[:12], "host-b"]]
    assert cast.token_a not in out and cast.token_b not in out


def test_a_revoked_token_is_refused(cast: Cast, capsys: pytest.CaptureFixture[str]) -> None:
    assert nettrail(["token", "revoke", cast.token_a[:12]]) == 0
    assert capsys.readouterr().out == "revoked 1 token(s)\n"
    assert post(Client(), cast.token_a, [retransmit("host-a", 1)]).status_code == 401
    assert post(Client(), cast.token_b, [retransmit("host-b", 1)]).status_code == 200


def test_it_refuses_a_vague_or_unknown_prefix(cast: Cast, capsys: pytest.CaptureFixture[str]) -> None:
    assert nettrail(["token", "revoke", "nt_"]) == 2
    assert "at least 6 characters" in capsys.readouterr().err
    assert nettrail(["token", "revoke", "nt_zzzzzzzz"]) == 1
    assert "no token starts with 'nt_zzzzzzzz'" in capsys.readouterr().err
    assert IngestToken.objects.count() == 2

"""The record tables follow translators/records.py: a column per field, committed migrations, indexes."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, models

from translators.records import RECORD_TYPES, describe
from webapp.traces.models import KIND_MODELS, Connection
from webapp.traces.schema import kind_of

COLUMN_TYPES = {
    int: models.BigIntegerField,
    float: models.FloatField,
    str: models.TextField,
    bool: models.BooleanField,
    bytes: models.BinaryField,
}


def test_every_record_kind_has_a_table() -> None:
    assert sorted(KIND_MODELS) == sorted(kind_of(cls) for cls in RECORD_TYPES)
    assert KIND_MODELS["connection"].__name__ == "ConnectionSummary"
    assert KIND_MODELS["connection"] is not Connection


@pytest.mark.parametrize("cls", RECORD_TYPES, ids=kind_of)
def test_every_record_field_has_a_column_of_its_type(cls: type) -> None:
    model = KIND_MODELS[kind_of(cls)]
    columns = {f.name: f for f in model._meta.concrete_fields if f.name != "id"}
    assert list(columns) == [d.name for d in describe(cls)]
    for desc in describe(cls):
        field = columns[desc.name]
        expected = COLUMN_TYPES.get(desc.type, models.JSONField)
        assert type(field) is expected, desc.name
        assert field.null == desc.nullable, desc.name


@pytest.mark.django_db
def test_the_committed_migrations_match_the_models() -> None:
    out = StringIO()
    call_command("makemigrations", "traces", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


@pytest.mark.django_db
def test_the_database_has_every_column_and_the_idempotence_key() -> None:
    with connection.cursor() as cursor:
        for kind, model in KIND_MODELS.items():
            table = model._meta.db_table
            described = connection.introspection.get_table_description(cursor, table)
            assert {c.name for c in described} == {"id", *(d.name for d in describe(model.record_type))}, kind
            constraints = connection.introspection.get_constraints(cursor, table)
            unique = [c["columns"] for c in constraints.values() if c["unique"] and not c["primary_key"]]
            assert ["host_id", "boot_id", "seq"] in unique, kind


def test_the_dashboard_queries_have_indexes() -> None:
    def indexed(model: type[models.Model]) -> list[list[str]]:
        return [list(i.fields) for i in model._meta.indexes]

    assert ["host_id", "ts_wall"] in indexed(KIND_MODELS["tcp_state"])
    assert ["conn_uuid", "ts_ns"] in indexed(KIND_MODELS["tcp_state"])
    assert ["drop_reason_str", "ts_wall"] in indexed(KIND_MODELS["skb_drop"])
    assert ["skb_uid", "ts_ns"] in indexed(KIND_MODELS["skb_event"])
    assert ["rule_id", "ts_wall"] in indexed(KIND_MODELS["alert"])
    assert ["conn_uuid", "ts_ns"] not in indexed(KIND_MODELS["loss_report"])  # never names a connection
    conn = indexed(Connection)
    for wanted in (
        ["host_id", "last_seen"],
        ["comm", "last_seen"],
        ["pid", "last_seen"],
        ["src", "last_seen"],
        ["dst", "last_seen"],
        ["sport", "last_seen"],
        ["dport", "last_seen"],
        ["first_seen"],
    ):
        assert wanted in conn
    names = [i.name for m in (*KIND_MODELS.values(), Connection) for i in m._meta.indexes]
    assert len(names) == len(set(names))  # index names are global in PostgreSQL

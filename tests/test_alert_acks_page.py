"""The alerts list reads a page's acknowledgements in one query (alert_versions.acks_of),
and each row's acknowledgement is exactly ack_of()'s: its own version's, else the newest
of its own host's earlier versions, never another host's with the same alert_id."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from translators.records import Alert
from webapp.dashboard import alert_versions
from webapp.dashboard.models import AlertAck
from webapp.dashboard.tables import Alert as AlertRow
from webapp.traces.store import store_batch

pytestmark = pytest.mark.django_db
T0 = 1_700_000_000.0


def version(host: str, seq: int, alert_id: str) -> Alert:
    return Alert(
        host_id=host, boot_id="b", seq=seq, ts_ns=seq, ts_wall=T0 + seq, provider="nettrail", probe="alert",
        rule_id="K1", alert_id=alert_id, severity="warning", start=T0 + seq, count=1, message=f"{host} {seq}",
    )  # fmt: skip


def _ack(host: str, seq: int, user: Any, at_s: float) -> None:
    from datetime import UTC, datetime

    row = AlertRow.objects.get(host_id=host, boot_id="b", seq=seq)
    ack = AlertAck.objects.create(alert=row, user=user)  # `at` is set on creation: put it where the test says
    AlertAck.objects.filter(pk=ack.pk).update(at=datetime.fromtimestamp(T0 + at_s, UTC))


def test_each_rows_acknowledgement_is_ack_ofs_and_the_page_reads_them_in_one_query(
    django_assert_num_queries: Any,
) -> None:
    users = get_user_model().objects
    alice, bob = users.create_user("alice", password="pw-for-tests-only"), users.create_user("bob", password="pw-x")
    # a-1 on web1: versions 1, 2, 3; the first acked by alice, the second by bob later
    # a-2 on web1: versions 4, 5; the newest acked on itself
    # a-1 on web2 (same alert_id, other host): versions 6, 7, never acked
    # a-3 on web2: one version, never acked
    store_batch([version("web1", 1, "a-1"), version("web1", 2, "a-1"), version("web1", 3, "a-1")])
    store_batch([version("web1", 4, "a-2"), version("web1", 5, "a-2"), version("web2", 6, "a-1")])
    store_batch([version("web2", 7, "a-1"), version("web2", 8, "a-3")])
    _ack("web1", 1, alice, 10)
    _ack("web1", 2, bob, 20)
    _ack("web1", 5, alice, 5)
    rows = list(alert_versions.latest(AlertRow.objects.select_related("ack", "ack__user")).order_by("id"))
    assert [(r.host_id, r.seq) for r in rows] == [("web1", 3), ("web1", 5), ("web2", 7), ("web2", 8)]
    with django_assert_num_queries(1):
        batched = alert_versions.acks_of(rows)
    one_by_one = {r.pk: alert_versions.ack_of(r) for r in rows}
    assert batched == one_by_one
    names = [(ack.user.username if ack and ack.user else None) for ack in (batched[r.pk] for r in rows)]
    assert names == ["bob", "alice", None, None]

    client = Client()
    client.force_login(alice)
    listed = client.get("/api/dash/alerts").json()["alerts"]
    assert [(a["host_id"], a["message"], a["acked_by"]) for a in listed] == [
        ("web2", "web2 8", None), ("web2", "web2 7", None), ("web1", "web1 5", "alice"), ("web1", "web1 3", "bob"),
    ]  # fmt: skip
    assert [a["acked_at"] for a in listed] == [None, None, T0 + 5, T0 + 20]


def test_a_page_without_alert_ids_or_acks_needs_no_query(django_assert_num_queries: Any) -> None:
    store_batch([version("web1", 1, "a-1")])
    rows = list(AlertRow.objects.select_related("ack"))
    AlertRow.objects.filter(pk=rows[0].pk).update(alert_id=None)
    rows = list(AlertRow.objects.select_related("ack"))
    with django_assert_num_queries(0):
        assert alert_versions.acks_of(rows) == {rows[0].pk: None}

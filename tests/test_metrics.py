"""GET /metrics: login or ingest token, per-host counters from real ingests, latency histogram,
parsed with prometheus_client's own parser."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families
from report_cast import alpha_records, beta_records, plausible

from translators import records as r
from webapp.metrics.exposition import INGEST_LATENCY
from webapp.traces.tokens import create_token

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def ingest(client: Client, token: str, batch: list[r.Record]) -> int:
    resp = client.post("/api/ingest", msgspec.msgpack.encode(batch), content_type="application/msgpack",
                       HTTP_AUTHORIZATION=f"Bearer {token}")  # fmt: skip
    return resp.status_code


def scrape(client: Client, **headers: str) -> dict[str, Any]:
    resp = client.get("/metrics", **headers)
    assert resp.status_code == 200
    assert resp["Content-Type"].startswith("text/plain; version=")
    return {f.name: f for f in text_string_to_metric_families(resp.content.decode())}


def samples(families: dict[str, Any], name: str, suffix: str = "_total") -> dict[tuple[str, ...], float]:
    return {tuple(sorted(s.labels.items())): s.value for s in families[name].samples if s.name == name + suffix}


@pytest.fixture
def tokens(db: None) -> dict[str, str]:
    return {host: create_token(host)[1] for host in ("alpha", "beta")}


def test_it_needs_a_login_or_an_ingest_token(tokens: dict[str, str]) -> None:
    client = Client()
    resp = client.get("/metrics")
    assert resp.status_code == 401 and resp.json() == {"error": "login or an ingest token required"}
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer nt_not-a-token-at-all").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {tokens['beta']}").status_code == 200
    client.force_login(get_user_model().objects.create_user("viewer"))
    assert client.get("/metrics").status_code == 200


def logged_in() -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_user("scraper", password="not-used-here"))
    return client


def test_counters_follow_what_was_stored_per_host(tokens: dict[str, str]) -> None:
    client = Client()
    assert ingest(client, tokens["alpha"], plausible(alpha_records())) == 200
    assert ingest(client, tokens["beta"], plausible(beta_records())) == 200
    assert ingest(client, tokens["alpha"], plausible(alpha_records())) == 200  # a resend counts nothing
    fam = scrape(logged_in())  # a logged-in user sees every host
    ingested = samples(fam, "nettrail_records_ingested")
    assert ingested[(("host", "alpha"), ("kind", "tcp_state"))] == 4
    assert ingested[(("host", "alpha"), ("kind", "siftr_sample"))] == 5
    assert ingested[(("host", "beta"), ("kind", "skb_drop"))] == 1
    assert sum(v for k, v in ingested.items() if ("host", "alpha") in k) == 17
    assert samples(fam, "nettrail_connections_opened") == {(("host", "alpha"),): 2, (("host", "beta"),): 1}
    assert samples(fam, "nettrail_connections_closed") == {(("host", "alpha"),): 1}
    assert samples(fam, "nettrail_tcp_retransmits") == {(("host", "alpha"),): 1}
    assert samples(fam, "nettrail_tcp_resets") == {(("host", "alpha"), ("sender", "peer")): 1}
    assert samples(fam, "nettrail_drops") == {}  # the cast's DropCount reports no new drops (delta 0)
    assert samples(fam, "nettrail_drop_events") == {
        (("host", "alpha"), ("reason", "NO_SOCKET")): 1,
        (("host", "beta"), ("reason", "TCP_CSUM")): 1,
    }
    assert samples(fam, "nettrail_collector_lost_events") == {(("event_type", "tcp_probe"), ("host", "alpha")): 7}
    assert fam["nettrail_hosts"].samples[0].value == 2
    assert fam["nettrail_records_ingested"].type == "counter"
    # A host's token sees its own counters only (tests/test_host_isolation.py too).
    own = scrape(client, HTTP_AUTHORIZATION=f"Bearer {tokens['beta']}")
    assert samples(own, "nettrail_drop_events") == {(("host", "beta"), ("reason", "TCP_CSUM")): 1}
    assert samples(own, "nettrail_connections_opened") == {(("host", "beta"),): 1}
    assert "nettrail_hosts" not in own


def test_exact_kernel_drop_counts_add_their_deltas(tokens: dict[str, str]) -> None:
    client = Client()
    batch = [
        r.DropCount(
            host_id="alpha",
            boot_id="b",
            seq=i,
            ts_ns=i,
            ts_wall=1_700_000_000.0 + i,
            provider="skb",
            probe="drop-count",
            drop_reason_str="TCP_CSUM",
            count=10 * i,
            delta=10,
        )  # fmt: skip
        for i in (1, 2, 3)
    ]
    assert ingest(client, tokens["alpha"], batch) == 200
    fam = scrape(client, HTTP_AUTHORIZATION=f"Bearer {tokens['alpha']}")
    assert samples(fam, "nettrail_drops") == {(("host", "alpha"), ("reason", "TCP_CSUM")): 30}


def test_ingest_latency_is_a_histogram_by_outcome(tokens: dict[str, str]) -> None:
    client = Client()
    viewer = logged_in()  # the latency histogram is server-wide: not for a host's token
    before = samples(scrape(viewer), "nettrail_ingest_request_duration_seconds", "_count")
    assert ingest(client, tokens["alpha"], plausible(beta_records())) == 403  # another host's records
    assert ingest(client, tokens["beta"], plausible(beta_records())) == 200
    fam = scrape(viewer)
    after = samples(fam, "nettrail_ingest_request_duration_seconds", "_count")
    for outcome in ("stored", "rejected"):
        key = (("outcome", outcome),)
        assert after[key] - before.get(key, 0.0) == 1
    assert fam["nettrail_ingest_request_duration_seconds"].type == "histogram"
    buckets = [s for s in fam["nettrail_ingest_request_duration_seconds"].samples if s.name.endswith("_bucket")]
    assert {s.labels["le"] for s in buckets} >= {"0.001", "10.0", "+Inf"}


def stored_count() -> float:
    (family,) = INGEST_LATENCY.collect()
    return sum(s.value for s in family.samples if s.name.endswith("_count") and s.labels["outcome"] == "stored")


@pytest.mark.django_db(transaction=True)
async def test_ingest_is_timed_on_the_asgi_stack_too(transactional_db: None) -> None:
    from asgiref.sync import sync_to_async
    from django.db import connections
    from django.test import AsyncClient

    def make_token() -> str:
        raw = create_token("beta")[1]
        connections.close_all()
        return raw

    token = await sync_to_async(make_token)()
    before = stored_count()
    resp = await AsyncClient().post("/api/ingest", msgspec.msgpack.encode(plausible(beta_records())),
                                    content_type="application/msgpack", headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    assert resp.status_code == 200
    assert stored_count() - before == 1
    await sync_to_async(connections.close_all)()


def collector_stats(host: str, seq: int, cpu_total_s: float, programs_total_ns: int | None) -> r.CollectorStats:
    known = programs_total_ns is not None
    return r.CollectorStats(
        host_id=host, boot_id="b", seq=seq, ts_ns=seq, ts_wall=1_700_000_000.0 + 10 * seq, provider="nettrail",
        probe="stats", pid=4321, interval_s=10.0, cpu_time_s=0.5, cpu_total_s=cpu_total_s, cpu_percent=5.0,
        events=0, events_per_s=0.0, records=0, children_cpu_time_s=0.01 if known else None,
        children_cpu_total_s=0.25 if known else None, programs_run_time_ns=1_000 if known else None,
        programs_run_count=10 if known else None, programs_run_time_total_ns=programs_total_ns,
        agent_cpu_percent=5.1 if known else None,
    )  # fmt: skip


def test_the_collectors_own_cpu_and_its_programs_kernel_time_are_counters_per_host(tokens: dict[str, str]) -> None:
    client = Client()
    # alpha's newest interval (by time, whatever order they came in) gives its counters
    newest, older = collector_stats("alpha", 2, 12.5, 2_750_000_000), collector_stats("alpha", 1, 12.0, 2_000_000_000)
    assert ingest(client, tokens["alpha"], [newest, older]) == 200
    # beta's collector could not measure its programs: no programs sample, not 0
    assert ingest(client, tokens["beta"], [collector_stats("beta", 1, 3.0, None)]) == 200
    families = scrape(logged_in())
    assert samples(families, "nettrail_collector_cpu_seconds") == {(("host", "alpha"),): 12.5, (("host", "beta"),): 3.0}
    assert samples(families, "nettrail_collector_children_cpu_seconds") == {(("host", "alpha"),): 0.25}
    assert samples(families, "nettrail_collector_programs_seconds") == {(("host", "alpha"),): 2.75}
    assert families["nettrail_collector_programs_seconds"].type == "counter"
    # a host's token sees its own collector only
    own = scrape(client, HTTP_AUTHORIZATION=f"Bearer {tokens['beta']}")
    assert samples(own, "nettrail_collector_cpu_seconds") == {(("host", "beta"),): 3.0}
    assert samples(own, "nettrail_collector_programs_seconds") == {}

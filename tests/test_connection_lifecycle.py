"""The Connection table: one row per conn_uuid, updated from state, retransmit, reset, summary, SIFTR and alert records."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from translators import records as r
from webapp.traces.models import Connection
from webapp.traces.store import store_batch

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
HOST, BOOT, UUID = "host-a", "boot-1", "conn-x"
FLOW = {"src": "10.0.0.1", "sport": 40000, "dst": "10.0.0.2", "dport": 443, "ip_ver": 4}


def env(seq: int, ts: float, **kw: object) -> dict[str, object]:
    return {
        "host_id": HOST,
        "boot_id": BOOT,
        "seq": seq,
        "ts_ns": int(ts * 1e9),
        "ts_wall": ts,
        "conn_uuid": UUID,
        **FLOW,
        **kw,
    }


def state(seq: int, ts: float, prev: str, new: str, **kw: object) -> r.TcpStateChange:
    return r.TcpStateChange(**env(seq, ts, **kw), provider="tcp", probe="state-change", prev_state=prev, state=new)


def test_it_creates_the_connection_from_its_first_state_change() -> None:
    store_batch([state(1, 10.0, "CLOSED", "SYN_SENT", pid=7, tgid=7, comm="curl", uid=1000, ctx="task")])
    conn = Connection.objects.get()
    assert (conn.host_id, conn.boot_id, conn.conn_uuid, conn.proto) == (HOST, BOOT, UUID, "tcp")
    assert (conn.src, conn.sport, conn.dst, conn.dport, conn.ip_ver) == ("10.0.0.1", 40000, "10.0.0.2", 443, 4)
    assert (conn.state, conn.first_seen, conn.last_seen, conn.closed) == ("SYN_SENT", 10.0, 10.0, False)
    assert (conn.pid, conn.tgid, conn.comm, conn.uid) == (7, 7, "curl", 1000)
    assert (conn.retransmits, conn.resets, conn.alerts, conn.anomaly) == (0, 0, 0, False)


def test_it_follows_the_lifecycle_across_batches() -> None:
    store_batch([state(1, 10.0, "CLOSED", "SYN_SENT"), state(2, 10.5, "SYN_SENT", "ESTABLISHED")])
    retrans = r.TcpRetransmit(**env(3, 11.0), provider="tcp", probe="retransmit", state="ESTABLISHED")
    sample = r.SiftrSample(**env(4, 11.5), provider="siftr", probe="siftr", direction="out", srtt=2500, snd_cwnd=14480)
    store_batch([retrans, sample, r.TcpRetransmit(**env(5, 12.0), provider="tcp", probe="retransmit")])
    store_batch([state(6, 13.0, "ESTABLISHED", "FIN_WAIT_1"), state(7, 14.0, "FIN_WAIT_1", "CLOSED")])
    conn = Connection.objects.get()
    assert (conn.state, conn.closed, conn.retransmits) == ("CLOSED", True, 2)
    assert (conn.first_seen, conn.last_seen, conn.srtt_us, conn.snd_cwnd) == (10.0, 14.0, 2500, 14480)
    assert conn.anomaly is False


def test_a_late_older_state_change_does_not_roll_the_state_back() -> None:
    store_batch([state(2, 20.0, "SYN_SENT", "ESTABLISHED")])
    store_batch([state(1, 19.0, "CLOSED", "SYN_SENT")])
    conn = Connection.objects.get()
    assert (conn.state, conn.first_seen, conn.last_seen) == ("ESTABLISHED", 19.0, 20.0)


def test_a_reset_and_an_alert_mark_the_connection_anomalous() -> None:
    store_batch([state(1, 1.0, "CLOSED", "SYN_SENT")])
    store_batch([r.TcpReset(**env(2, 2.0), provider="tcp", probe="reset-received", sender="peer")])
    conn = Connection.objects.get()
    assert (conn.resets, conn.anomaly) == (1, True)
    alert = r.Alert(
        **env(3, 3.0), provider="nettrail", probe="alert", rule_id="K1", severity="warning", start=3.0, message="m"
    )
    store_batch([alert])
    assert Connection.objects.get().alerts == 1


def test_the_kernel_summary_sets_bytes_and_closes_the_connection() -> None:
    store_batch(
        [state(1, 1.0, "CLOSED", "SYN_SENT"), r.TcpRetransmit(**env(2, 2.0), provider="tcp", probe="retransmit")]
    )
    summary = r.Connection(
        **env(3, 5.0), provider="tcp", probe="connection", proto="tcp", source="kernel", start=0.5, end=5.0,
        bytes_orig=1000, bytes_resp=5000, bytes_acked=1001, bytes_received=5001, total_retrans=4, state="CLOSED",
    )  # fmt: skip
    store_batch([summary])
    conn = Connection.objects.get()
    assert (conn.bytes_orig, conn.bytes_resp, conn.bytes_acked, conn.bytes_received) == (1000, 5000, 1001, 5001)
    assert (conn.retransmits, conn.first_seen, conn.last_seen, conn.state, conn.closed) == (4, 0.5, 5.0, "CLOSED", True)


def test_the_summary_gives_a_live_connection_its_zeek_conn_state_and_history() -> None:
    """The collector fills them (analysis/flows/live_summary.py); the row, and so the API's
    connection list, keeps them, and a summary without them (an older collector) keeps none."""
    store_batch([state(1, 1.0, "CLOSED", "SYN_SENT")])
    assert Connection.objects.values_list("conn_state", "history").get() == (None, None)
    summary = r.Connection(
        **env(2, 5.0), provider="tcp", probe="connection", proto="tcp", source="kernel", start=1.0, end=5.0,
        state="CLOSED", conn_state="RSTR", history="ShADar",
    )  # fmt: skip
    store_batch([summary])
    assert Connection.objects.values_list("conn_state", "history").get() == ("RSTR", "ShADar")
    client = Client()
    client.force_login(get_user_model().objects.create_user("viewer", password="viewer-password-1"))
    listed = client.get("/api/connections")
    assert listed.status_code == 200
    [row] = listed.json()["connections"]
    assert (row["conn_state"], row["history"]) == ("RSTR", "ShADar")


def test_task_context_attribution_replaces_softirq_attribution() -> None:
    store_batch([state(1, 1.0, "SYN_RECEIVED", "ESTABLISHED", pid=0, comm="swapper/0", ctx="softirq")])
    store_batch([state(2, 2.0, "ESTABLISHED", "CLOSE_WAIT", pid=321, tgid=321, comm="nginx", uid=33, ctx="task")])
    store_batch([state(3, 3.0, "CLOSE_WAIT", "LAST_ACK", pid=0, comm="swapper/1", ctx="softirq")])
    conn = Connection.objects.get()
    assert (conn.pid, conn.comm, conn.uid) == (321, "nginx", 33)


def test_records_of_other_kinds_and_without_a_uuid_make_no_connection() -> None:
    drop = r.SkbDrop(**env(1, 1.0), provider="skb", probe="m-free", drop_reason=2, drop_reason_str="NO_SOCKET")
    no_uuid = r.TcpStateChange(**{**env(2, 1.0), "conn_uuid": None}, provider="tcp", probe="state-change",
                               prev_state="CLOSED", state="SYN_SENT")  # fmt: skip
    store_batch([drop, no_uuid])
    assert Connection.objects.count() == 0


def test_a_port_unknown_at_connect_time_is_filled_in_later() -> None:
    store_batch([state(1, 1.0, "CLOSED", "SYN_SENT", sport=0, src="0.0.0.0")])
    store_batch([state(2, 2.0, "SYN_SENT", "ESTABLISHED")])
    conn = Connection.objects.get()
    assert (conn.src, conn.sport, conn.dst, conn.dport) == ("10.0.0.1", 40000, "10.0.0.2", 443)


def counters(seq: int, ts: float, out: int, into: int, **kw: object) -> r.FlowCounters:
    return r.FlowCounters(
        **env(seq, ts, **kw), provider="siftr", probe="flow-counters", proto="tcp", bytes_out=out, bytes_in=into
    )


def test_flow_counters_give_an_open_connection_its_bytes() -> None:
    store_batch([state(1, 10.0, "CLOSED", "SYN_SENT", active=True), counters(2, 11.0, 1000, 5000)])
    store_batch([counters(4, 13.0, 3000, 9000), counters(3, 12.0, 2000, 7000)])  # the older one arrives late
    conn = Connection.objects.get()
    assert (conn.bytes_orig, conn.bytes_resp, conn.active, conn.closed) == (3000, 9000, True, False)
    assert (conn.state, conn.last_seen) == ("SYN_SENT", 13.0)


def test_an_accepted_connection_counts_its_received_bytes_as_the_originators() -> None:
    store_batch([counters(1, 10.0, 300, 4000)])  # direction not known yet: local side as originator
    assert Connection.objects.values_list("bytes_orig", "bytes_resp").get() == (300, 4000)
    store_batch([state(2, 10.5, "LISTEN", "SYN_RECEIVED", active=False), counters(3, 11.0, 800, 6000)])
    conn = Connection.objects.get()
    assert (conn.bytes_orig, conn.bytes_resp, conn.active) == (6000, 800, False)


def test_top_talkers_by_bytes_include_open_connections(admin_client: Client) -> None:
    store_batch([state(1, 10.0, "CLOSED", "SYN_SENT", active=True), counters(2, 11.0, 1500, 2500)])
    other = {"conn_uuid": "conn-y", "sport": 40001}
    store_batch([state(3, 10.0, "CLOSED", "SYN_SENT", **other), counters(4, 11.0, 100, 200, **other)])
    top = admin_client.get("/api/dash/overview").json()["top_bytes"]
    assert [(row["conn_uuid"], row["bytes"], row["state"], row["closed"]) for row in top] == [
        ("conn-x", 4000, "SYN_SENT", False),
        ("conn-y", 300, "SYN_SENT", False),
    ]


def test_a_partly_resent_batch_counts_only_its_new_records() -> None:
    first = r.TcpRetransmit(**env(1, 11.0), provider="tcp", probe="retransmit")
    second = r.TcpRetransmit(**env(2, 12.0), provider="tcp", probe="retransmit")
    assert (store_batch([first]).stored, store_batch([first, second, second]).stored) == (1, 1)
    result = store_batch([first, second])
    assert (result.stored, result.duplicates, result.new) == (0, 2, [])
    assert Connection.objects.values_list("retransmits", "last_seen").get() == (2, 12.0)


def test_the_zeek_export_writes_an_accepted_live_connection_from_its_originator() -> None:
    """The row's `active` (from the tcp_state records) tells webapp/reports/zeek.py that this
    host accepted the connection: the remote side is the originator, as the history says."""
    uuid = "6f2d7a1e-3b5c-4c1e-9f51-6e6574747262"
    accepted = state(1, 1.0, "LISTEN", "SYN_RECEIVED", conn_uuid=uuid, active=False)
    summary = r.Connection(
        **env(2, 5.0, conn_uuid=uuid), provider="tcp", probe="connection", proto="tcp", source="kernel",
        start=1.0, end=5.0, duration=4.0, state="CLOSED", conn_state="SF", history="ShADFf", bytes_acked=1,
        bytes_received=3001, segs_in=5, segs_out=4,
    )  # fmt: skip
    store_batch([accepted, summary])
    client = Client()
    client.force_login(get_user_model().objects.create_user("viewer", password="viewer-password-1"))
    resp = client.get(f"/api/connections/{uuid}/export", {"format": "zeek", "host": HOST})
    assert resp.status_code == 200
    lines = [ln for ln in b"".join(resp.streaming_content).decode().splitlines() if not ln.startswith("#")]  # type: ignore[attr-defined]
    [line] = lines
    cols = line.split("\t")
    # id.orig_h id.orig_p id.resp_h id.resp_p ... orig_bytes resp_bytes conn_state ... history
    assert cols[2:6] == ["10.0.0.2", "443", "10.0.0.1", "40000"]
    assert (cols[9], cols[10], cols[11], cols[15]) == ("3001", "1", "SF", "ShADFf")

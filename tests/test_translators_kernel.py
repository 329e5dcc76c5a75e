"""Kernel-event translators (tcp, siftr, tcpdebug): exact struct bytes in, exact record fields out."""

from __future__ import annotations

import socket
from typing import Any

import numpy as np
import pytest

from collector.bpf import layout
from translators import kernel
from translators.kernel import KernelEnv, as_struct
from translators.records import Record, connection_uuid, from_json, from_msgpack, to_json, to_msgpack
from translators.registry import KERNEL_TRANSLATORS

ENV = KernelEnv(
    host_id="h1",
    boot_id="b1",
    wall_offset=1_700_000_000.0,
    drop_reasons={36: "TCP_RFC7323_PAWS"},
    rst_reasons={1: "NO_SOCKET"},
)
V4 = {
    "family": 2,
    "saddr": socket.inet_aton("10.0.0.1"),
    "daddr": socket.inet_aton("10.0.0.2"),
    "sport": 40000,
    "dport": 80,
}
OWNER = {"pid": 7, "tgid": 7, "uid": 1000, "gid": 100, "cgroup_id": 55, "comm": b"curl", "attribution": 2}


def event(event_type: int, **fields: Any) -> bytes:
    """struct nt_event bytes with the given fields set (the rest zero)."""
    raw = np.zeros((), dtype=layout.EVENT_DTYPES[event_type])
    raw["type"] = event_type
    for name, value in {
        "ts_ns": 2_000_000_000,
        "cookie": 4242,
        "cpu": 1,
        "netns": 4026531840,
        "ctx": 2,
        **fields,
    }.items():
        raw[name] = np.void(value.ljust(16, b"\0")) if name in ("saddr", "daddr") else value
    return raw.tobytes()


@pytest.fixture(autouse=True)
def validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel, "VALIDATE", True)


def translate(data: bytes) -> list[Record]:
    kind, fields = layout.decode_event(data)
    return KERNEL_TRANSLATORS[kind](fields, ENV)


def test_a_softirq_state_change_takes_attribution_from_the_owner_map() -> None:
    [rec] = translate(event(layout.EV_STATE, **V4, **OWNER, oldstate=1, newstate=8))
    assert (rec.kind, rec.provider, rec.probe, rec.hook) == (
        "tcp_state",
        "tcp",
        "state-change",
        "tp_btf/inet_sock_set_state",
    )
    assert (rec.prev_state, rec.state, rec.linux_prev_state, rec.linux_state) == ("ESTABLISHED", "CLOSE_WAIT", 1, 8)  # type: ignore[attr-defined]
    assert (rec.ctx, rec.attribution, rec.pid, rec.comm, rec.uid, rec.cgroup_id) == (
        "softirq",
        "owner-map",
        7,
        "curl",
        1000,
        55,
    )
    assert (rec.src, rec.sport, rec.dst, rec.dport, rec.ip_ver) == ("10.0.0.1", 40000, "10.0.0.2", 80, 4)  # type: ignore[attr-defined]
    assert rec.caused_by == "peer" and rec.inferred is False  # type: ignore[attr-defined]
    assert (rec.ts_ns, rec.ts_wall, rec.sock_cookie, rec.netns) == (2_000_000_000, 1_700_000_002.0, 4242, 4026531840)
    assert rec.conn_uuid == connection_uuid("h1", "b1", 4242)


def test_fin_wait_2_to_close_becomes_an_inferred_time_wait_then_closed() -> None:
    """After the peer's FIN (NT_STATE_FIN_RCVD): the timewait mini-socket is in TIME_WAIT."""
    records = translate(event(layout.EV_STATE, **V4, oldstate=5, newstate=7, sk_err=0, flags=1))
    assert [(r.prev_state, r.state, r.inferred, r.approx, r.linux_state) for r in records] == [  # type: ignore[attr-defined]
        ("FIN_WAIT_2", "TIME_WAIT", True, ["state"], None),
        ("TIME_WAIT", "CLOSED", False, ["prev_state"], 7),
    ]
    assert records[0].pid is None and records[0].attribution is None  # no owner known


@pytest.mark.parametrize("old", [4, 5], ids=["FIN_WAIT_1", "FIN_WAIT_2"])
def test_a_close_before_the_peers_fin_is_a_fin_wait_2_timewait_socket_not_a_time_wait(old: int) -> None:
    """An orphan whose FIN was acked: its timewait mini-socket waits in FIN_WAIT_2 (ss's FIN-WAIT-2)."""
    [rec] = translate(event(layout.EV_STATE, **V4, oldstate=old, newstate=7, sk_err=0, flags=0))
    assert (rec.state, rec.inferred, rec.linux_state) == ("CLOSED", False, 7)  # type: ignore[attr-defined]


def test_closing_to_close_is_a_time_wait_whatever_the_flag() -> None:
    records = translate(event(layout.EV_STATE, **V4, oldstate=11, newstate=7, sk_err=0, flags=0))
    assert [r.state for r in records] == ["TIME_WAIT", "CLOSED"]  # type: ignore[attr-defined]


def test_an_error_close_from_fin_wait_1_is_not_a_time_wait() -> None:
    [rec] = translate(event(layout.EV_STATE, **V4, oldstate=4, newstate=7, sk_err=104))
    assert (rec.prev_state, rec.state, rec.inferred) == ("FIN_WAIT_1", "CLOSED", False)  # type: ignore[attr-defined]


def test_an_unknown_linux_state_is_an_error_naming_the_field() -> None:
    with pytest.raises(ValueError, match="tcp_state.state: unknown Linux tcp_state 99"):
        translate(event(layout.EV_STATE, **V4, oldstate=1, newstate=99))


def test_a_retransmission_carries_sequence_numbers_payload_and_kind() -> None:
    [rec] = translate(
        event(layout.EV_RETRANSMIT, **V4, seq=1000, end_seq=2449, segs=1, tcp_flags=0x19, state=1, ca_state=4)
    )
    assert (rec.probe, rec.tcp_seq, rec.tcp_seq_end, rec.tcp_payload_len) == ("retransmit", 1000, 2449, 1448)  # type: ignore[attr-defined]
    assert (rec.retrans_kind, rec.ca_state, rec.state, rec.segs, rec.err) == ("rto", "Loss", "ESTABLISHED", 1, 0)  # type: ignore[attr-defined]


def test_a_socketless_reset_sent_names_its_reason_and_has_no_cookie() -> None:
    [rec] = translate(event(layout.EV_RESET, **V4, cookie=0, reason=1, sender=0, active=0, has_sock=0))
    assert (rec.probe, rec.sender, rec.reason, rec.state, rec.active, rec.sock_cookie, rec.conn_uuid) == (
        "reset-sent", "local", "NO_SOCKET", None, False, None, None,
    )  # fmt: skip


def test_a_reset_received_is_from_the_peer() -> None:
    [rec] = translate(event(layout.EV_RESET, **V4, state=2, sender=1, has_sock=1))
    assert (rec.probe, rec.hook, rec.sender, rec.state, rec.reason) == (
        "reset-received",
        "tp_btf/tcp_receive_reset",
        "peer",
        "SYN_SENT",
        None,
    )  # type: ignore[attr-defined]


def test_destroy_gives_a_kernel_connection_summary_with_final_counters() -> None:
    [rec] = translate(
        event(
            layout.EV_DESTROY,
            **V4,
            bytes_acked=5002,
            bytes_received=11,
            first_ns=1_500_000_000,
            segs_in=9,
            segs_out=12,
            total_retrans=2,
            state=7,
        )
    )
    assert (rec.kind, rec.probe, rec.source, rec.proto, rec.state) == (
        "connection",
        "destroy",
        "kernel",
        "tcp",
        "CLOSED",
    )  # type: ignore[attr-defined]
    assert (rec.bytes_acked, rec.bytes_received, rec.segs_in, rec.segs_out, rec.total_retrans) == (5002, 11, 9, 12, 2)  # type: ignore[attr-defined]
    assert (rec.lifetime_ns, rec.start, rec.end, rec.duration) == (500_000_000, 1_700_000_001.5, 1_700_000_002.0, 0.5)  # type: ignore[attr-defined]


def test_a_siftr_sample_uses_freebsd_units_and_flags() -> None:
    snap = {
        "snd_cwnd": 10, "snd_ssthresh": 0x7FFFFFFF, "mss_cache": 1448, "srtt_us": 800, "mdev_us": 400, "rto_us": 204000,
        "snd_una": 0xFFFFFF00, "snd_nxt": 0x100, "write_seq": 0x200, "rcv_nxt": 5, "copied_seq": 0xFFFFFFFF,
        "snd_wnd": 65535, "rcv_wnd": 131072, "sndbuf": 87040, "rcvbuf": 131072, "state": 1, "ca_state": 3,
        "snd_wscale": 7, "rcv_wscale": 9, "flags": 0x80 | 0x01 | 0x02 | 0x04 | 0x08, "rxhash": 0,
        "cc_algo": b"cubic", "th_seq": 77, "th_ack": 88, "data_sz": 1448, "direction": 1,
    }  # fmt: skip
    [rec] = translate(event(layout.EV_SIFTR, **V4, **OWNER, **snap))
    assert (rec.provider, rec.probe, rec.hook, rec.direction) == ("siftr", "siftr", "tp_btf/net_dev_queue", "out")  # type: ignore[attr-defined]
    assert (rec.snd_cwnd, rec.snd_ssthresh, rec.mss, rec.srtt, rec.rttvar, rec.rto) == (
        14480,
        1073725440,
        1448,
        100,
        100,
        204000,
    )  # type: ignore[attr-defined]
    assert (rec.sent_inflight_bytes, rec.snd_buf_cc, rec.rcv_buf_cc) == (0x200, 0x300, 6)  # type: ignore[attr-defined]
    assert rec.t_flags == 0x4 | 0x20 | 0x40 | 0x80 | 0x100 | 0x200 | 0x100000  # type: ignore[attr-defined]
    assert (rec.t_flags2, rec.sack_enabled, rec.snd_scale, rec.rcv_scale, rec.conn_state) == (0, True, 7, 9, 4)  # type: ignore[attr-defined]
    assert (rec.ca_state, rec.cc_algo, rec.flowid, rec.th_seq, rec.th_ack, rec.data_sz) == (
        "Recovery",
        "cubic",
        4242,
        77,
        88,
        1448,
    )  # type: ignore[attr-defined]
    assert "snd_cwnd" in rec.approx


def test_a_polled_siftr_sample_says_so_and_has_no_packet_fields() -> None:
    """siftr-poll (kmod/siftr_poll.bpf.c): direction 2, read at a poll of the socket; the
    kernel writes 0 into the packet's fields, which have no value there."""
    snap = {"snd_cwnd": 10, "mss_cache": 1448, "state": 1, "flags": 0x80, "direction": 2, "ctx": 0}
    [rec] = translate(event(layout.EV_SIFTR, **V4, **OWNER, **snap))
    assert (rec.hook, rec.direction, rec.ctx) == ("iter/tcp", "poll", "unknown")  # type: ignore[attr-defined]
    assert (rec.th_seq, rec.th_ack, rec.data_sz, rec.snd_cwnd) == (None, None, None, 14480)  # type: ignore[attr-defined]


def test_flow_counters_copy_the_kernels_exact_counts() -> None:
    raw = event(layout.EV_FLOW, **V4, packets_in=3, packets_out=5, bytes_in=10, bytes_out=7000, samples=1, skbs=4)
    [rec] = translate(raw)
    assert (rec.kind, rec.proto, rec.packets_in, rec.packets_out, rec.bytes_in, rec.bytes_out, rec.samples, rec.skbs) == (  # type: ignore[attr-defined]
        "flow_counters", "tcp", 3, 5, 10, 7000, 1, 4,
    )  # fmt: skip


def test_a_debug_drop_names_the_kernel_drop_reason_and_an_invalid_snapshot_stays_null() -> None:
    [rec] = translate(
        event(
            layout.EV_DEBUG,
            **V4,
            direction=4,
            prureq=0xFF,
            drop_reason=36,
            has_seg=1,
            th_seq=9,
            th_flags=0x10,
            payload_len=4,
        )
    )
    assert (rec.probe, rec.direction, rec.drop_reason, rec.hook) == (
        "debug-drop",
        "drop",
        "TCP_RFC7323_PAWS",
        "tp_btf/kfree_skb",
    )  # type: ignore[attr-defined]
    assert (rec.tcp_seq, rec.tcp_flags, rec.tcp_payload_len) == (9, 0x10, 4)  # type: ignore[attr-defined]
    assert (rec.state, rec.snd_una, rec.snd_cwnd, rec.prureq_str) == (None, None, None, None)  # type: ignore[attr-defined]


def test_a_debug_user_send_maps_to_pru_send() -> None:
    [rec] = translate(
        event(layout.EV_DEBUG, **V4, ctx=1, attribution=1, pid=3, direction=2, prureq=9, flags=0x80, state=1)
    )
    assert (rec.probe, rec.prureq, rec.prureq_str, rec.hook, rec.state, rec.ctx) == (
        "debug-user",
        9,
        "SEND",
        "tp_btf/sock_send_length",
        "ESTABLISHED",
        "task",
    )  # type: ignore[attr-defined]


def test_ipv6_addresses_are_compressed_and_mapped_ones_stay_ipv6() -> None:
    v6 = {
        "family": 10,
        "saddr": socket.inet_pton(socket.AF_INET6, "::ffff:10.0.0.1"),
        "daddr": socket.inet_pton(socket.AF_INET6, "2001:db8::1"),
        "sport": 1,
        "dport": 2,
    }
    [rec] = translate(event(layout.EV_STATE, **v6, oldstate=7, newstate=2, ctx=1))
    assert (rec.src, rec.dst, rec.ip_ver, rec.active, rec.caused_by) == (
        "::ffff:10.0.0.1",
        "2001:db8::1",
        6,
        True,
        "local",
    )  # type: ignore[attr-defined]


@pytest.mark.parametrize("event_type", sorted(layout.EVENT_DTYPES))
def test_every_kind_survives_the_json_and_msgpack_round_trip(event_type: int) -> None:
    fields: dict[str, Any] = {**V4, **OWNER}
    if event_type == layout.EV_STATE:
        fields.update(oldstate=1, newstate=4)
    if event_type == layout.EV_CONG:
        fields.update(new_ca_state=1)
    for rec in translate(event(event_type, **fields)):
        assert from_json(to_json(rec)) == rec
        assert from_msgpack(to_msgpack(rec)) == rec


@pytest.mark.parametrize("event_type", sorted(layout.EVENT_DTYPES))
def test_the_unvalidated_fast_build_gives_the_same_records(event_type: int, monkeypatch: pytest.MonkeyPatch) -> None:
    extra = {"oldstate": 1, "newstate": 5, "new_ca_state": 2, "mss_cache": 1448, "flags": 0x80}
    names = layout.EVENT_DTYPES[event_type].names or ()
    fields: dict[str, Any] = {**V4, **OWNER, **{k: v for k, v in extra.items() if k in names}}
    checked = translate(event(event_type, **fields))
    monkeypatch.setattr(kernel, "VALIDATE", False)
    fast = translate(event(event_type, **fields))
    assert fast == checked
    assert [to_json(r) for r in fast] == [to_json(r) for r in checked]
    fast[0].approx.append("x")  # no list is shared between records
    assert translate(event(event_type, **fields))[0].approx == checked[0].approx
    wire = KERNEL_TRANSLATORS[layout.decode_event(event(event_type, **fields))[0]](
        layout.decode_event(event(event_type, **fields))[1], KernelEnv(**{**ENV.__dict__, "wire": True})
    )
    assert [to_json(w) for w in wire] == [to_json(r) for r in checked]  # type: ignore[arg-type]
    assert [to_msgpack(w) for w in wire] == [to_msgpack(r) for r in checked]  # type: ignore[arg-type]
    assert [as_struct(w) for w in wire] == checked


def test_the_column_wise_siftr_batch_gives_the_row_by_row_records_byte_for_byte(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from translators.siftr import translate_sample, translate_sample_batch

    rows = np.zeros(6, dtype=layout.EVENT_DTYPES[layout.EV_SIFTR])
    rows["type"] = layout.EV_SIFTR
    rows["ts_ns"] = [1_000_000_001, 2_500_000_000, 3, 4_000_000_007, 5_123_456_789, 6]
    rows["cookie"] = [7, 7, 0, 9, 9, 11]
    rows["family"] = [2, 2, 10, 2, 0, 10]
    rows["saddr"][0] = np.void(socket.inet_aton("10.0.0.1").ljust(16, b"\0"))
    rows["saddr"][2] = np.void(socket.inet_pton(socket.AF_INET6, "::ffff:1.2.3.4"))
    rows["sport"], rows["dport"] = [1, 2, 3, 4, 5, 6], [80, 80, 443, 443, 0, 1]
    rows["attribution"] = [2, 1, 0, 2, 0, 1]
    rows["pid"], rows["comm"] = 42, b"iperf3"
    rows["ctx"], rows["direction"] = [1, 2, 2, 1, 0, 2], [1, 0, 1, 0, 2, 0]  # 2: a siftr-poll sample
    rows["snd_cwnd"], rows["mss_cache"] = [10, 0, 3, 44, 1, 2], [1448, 0, 536, 65483, 1, 9000]
    rows["snd_ssthresh"] = [0x7FFFFFFF, 5, 0x7FFFFFFF, 1, 0, 2]
    rows["flags"] = [0x80 | 0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x20, 0x80, 0x82, 0, 0x81, 0x84]
    rows["ca_state"] = [0, 1, 2, 3, 4, 3]
    rows["state"] = [1, 4, 5, 8, 9, 11]
    rows["snd_una"], rows["snd_nxt"], rows["write_seq"] = 0xFFFFFFF0, 0x10, 0x20
    rows["rcv_nxt"], rows["copied_seq"] = 5, [0xFFFFFFFF, 5, 0, 1, 2, 3]
    rows["srtt_us"], rows["mdev_us"], rows["rto_us"] = [800, 9, 0, 1 << 20, 8, 16], 400, [0, 204000, 1, 2, 3, 4]
    rows["snd_wscale"], rows["rcv_wscale"], rows["rxhash"] = 7, 9, [0, 0, 5, 0, 1, 0]
    rows["cc_algo"] = [b"cubic", b"", b"bbr", b"reno", b"cubic", b"x"]
    monkeypatch.setattr(kernel, "VALIDATE", False)
    env = KernelEnv(**{**ENV.__dict__, "wire": True})
    batch = translate_sample_batch(rows, env)
    names = rows.dtype.names or ()
    one_by_one = [r for row in rows.tolist() for r in translate_sample(dict(zip(names, row, strict=True)), env)]
    assert [to_json(r) for r in batch] == [to_json(r) for r in one_by_one]  # type: ignore[arg-type]
    assert batch[0]["approx"] is not batch[1]["approx"]  # type: ignore[index]


def random_rows(event_type: int, n: int, seed: int) -> np.ndarray:
    """n raw events of one type with random field values in their valid ranges."""
    rng = np.random.default_rng(seed)
    rows = np.zeros(n, dtype=layout.EVENT_DTYPES[event_type])
    for name in rows.dtype.names or ():
        kind = rows.dtype.fields[name][0]  # type: ignore[index]
        if kind.kind in "ui":
            info = np.iinfo(kind)
            rows[name] = rng.integers(max(info.min, -(2**31)), min(info.max, 2**40), size=n, dtype=np.int64)
        elif kind.kind in "SV":
            raw = rng.integers(97, 122, size=(n, kind.itemsize), dtype=np.uint8)
            rows[name] = [
                np.void(bytes(r)) if kind.kind == "V" else bytes(r[: rng.integers(0, kind.itemsize)]) for r in raw
            ]
    rows["type"] = event_type
    rows["family"] = rng.choice([0, 2, 10], size=n)
    rows["attribution"] = rng.choice([0, 1, 2], size=n)
    rows["ctx"] = rng.choice([0, 1, 2], size=n)
    rows["cookie"][::3] = 0
    if event_type == layout.EV_SKB_STAGE:
        rows["stage"] = rng.integers(0, 9, size=n)
        rows["end"] = rng.choice([0, 1, 3], size=n)
    if event_type == layout.EV_IP:
        rows["direction"] = rng.choice([0, 1], size=n)
        rows["version"] = rng.choice([4, 6], size=n)
        rows["protocol"] = rng.choice([6, 17, 44, 58, 200], size=n)
    if event_type == layout.EV_SIFTR:
        rows["direction"] = rng.choice([0, 1], size=n)
        rows["state"] = rng.integers(0, 14, size=n)
        rows["ca_state"] = rng.integers(0, 6, size=n)
    return rows


@pytest.mark.parametrize("kind", ["siftr_sample", "ip_packet", "skb_stage"])
def test_every_batch_translator_matches_its_row_translator_on_random_events(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from translators.kernel import row_by_row
    from translators.registry import KERNEL_BATCH_TRANSLATORS

    event_type = next(t for t, n in layout.EVENT_NAMES.items() if n == kind)
    rows = random_rows(event_type, 300, seed=event_type)
    monkeypatch.setattr(kernel, "VALIDATE", False)
    env = KernelEnv(**{**ENV.__dict__, "wire": True})
    batch = KERNEL_BATCH_TRANSLATORS[kind](rows, env)
    one_by_one = row_by_row(rows, env, KERNEL_TRANSLATORS[kind])
    assert [to_json(r) for r in batch] == [to_json(r) for r in one_by_one]  # type: ignore[arg-type]


def _text_fields(event_type: int) -> list[str]:
    dtype = layout.EVENT_DTYPES[event_type]
    return [n for n in dtype.names or () if dtype.fields[n][0].kind == "S"]  # type: ignore[index]


@pytest.mark.parametrize("event_type", [t for t in sorted(layout.EVENT_DTYPES) if _text_fields(t)])
def test_a_kernel_string_ends_at_its_first_nul_not_at_the_stale_bytes_after_it(event_type: int) -> None:
    """BPF_CORE_READ_STR_INTO writes "cubic\\0" into a ring slot that is not zeroed: the bytes
    after the NUL are an earlier event's. They once reached ingest, which refused the batch."""
    stale = {name: b"ab\0stale-bytes" for name in _text_fields(event_type)}
    extra = {"oldstate": 1, "newstate": 5, "new_ca_state": 2, "mss_cache": 1448, "flags": 0x80}
    names = layout.EVENT_DTYPES[event_type].names or ()
    fields: dict[str, Any] = {**V4, **OWNER, **{k: v for k, v in extra.items() if k in names}, **stale}
    records = translate(event(event_type, **fields))
    assert records
    for rec in records:
        texts = {name: getattr(rec, name, None) for name in ("comm", "cc_algo", "if_name")}
        assert "\0" not in to_json(rec).decode()
        assert {v for v in texts.values() if v is not None} <= {"ab"}
        assert any(v == "ab" for v in texts.values()), texts


def test_the_siftr_batch_cuts_kernel_strings_at_the_first_nul_like_the_row_form(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from translators.kernel import row_by_row
    from translators.siftr import translate_sample, translate_sample_batch

    rows = random_rows(layout.EV_SIFTR, 50, seed=3)
    rows["cc_algo"] = [b"cubic\0\0\0stale"[: 4 + i % 11] for i in range(50)]
    rows["comm"] = b"curl\0old-comm"
    monkeypatch.setattr(kernel, "VALIDATE", False)
    env = KernelEnv(**{**ENV.__dict__, "wire": True})
    batch = translate_sample_batch(rows, env)
    assert [to_json(r) for r in batch] == [to_json(r) for r in row_by_row(rows, env, translate_sample)]  # type: ignore[arg-type]
    assert {r["cc_algo"] for r in batch} == {"cubi", "cubic"}  # type: ignore[index]
    assert {r["comm"] for r in batch} <= {"curl", None}  # type: ignore[index]

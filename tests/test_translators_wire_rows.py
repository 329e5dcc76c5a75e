"""The collector's fast record form: WireRows from the column-wise SIFTR translator, grouped by connection.

Keep in sync with translators/kernel.py (WireRow, connection_groups, rows_in_wire_order)
and translators/siftr.py (translate_sample_batch).
"""

from __future__ import annotations

import socket

import numpy as np
import pytest

from collector.bpf import layout
from translators import kernel
from translators.kernel import KernelEnv, WireRow, as_struct, row_by_row
from translators.records import SiftrSample, to_json, to_msgpack
from translators.siftr import translate_sample, translate_sample_batch

ENV = KernelEnv(host_id="h1", boot_id="b1", wall_offset=1_795_000_000.123, wire=True)


def few_connections(n: int) -> np.ndarray:
    """n SIFTR events of three sockets; one changes owner and one learns its port mid-batch."""
    rng = np.random.default_rng(5)
    rows = np.zeros(n, dtype=layout.EVENT_DTYPES[layout.EV_SIFTR])
    rows["type"] = layout.EV_SIFTR
    rows["ts_ns"] = 4_903_987_852_340 + np.arange(n) * 1_234_567
    which = rng.integers(0, 3, size=n)
    rows["cookie"] = np.array([101, 202, 303])[which]
    rows["family"] = np.array([2, 10, 2])[which]
    rows["saddr"][which == 0] = np.void(socket.inet_aton("127.0.0.1").ljust(16, b"\0"))
    rows["saddr"][which == 1] = np.void(socket.inet_pton(socket.AF_INET6, "::1"))
    rows["sport"] = np.array([5201, 40000, 41000])[which]
    rows["sport"][(which == 2) & (np.arange(n) < n // 2)] = 0  # before the port is chosen
    rows["dport"] = 5201
    rows["attribution"], rows["pid"], rows["comm"] = 2, 42, b"iperf3"
    rows["pid"][(which == 0) & (np.arange(n) > n // 3)] = 43  # the owner map moved on
    rows["ctx"], rows["direction"] = rng.integers(0, 3, size=n), rng.integers(0, 2, size=n)
    rows["snd_cwnd"], rows["mss_cache"], rows["flags"] = rng.integers(1, 500, size=n), 65483, 0x87
    rows["srtt_us"], rows["snd_una"] = rng.integers(8, 9000, size=n), rng.integers(0, 2**32, size=n)
    rows["cc_algo"] = np.array([b"cubic", b"bbr", b""])[which]
    return rows


@pytest.fixture(autouse=True)
def fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel, "VALIDATE", False)


def test_the_batch_gives_wire_rows_with_the_row_translators_bytes_across_connection_groups() -> None:
    rows = few_connections(2000)
    batch = translate_sample_batch(rows, ENV)
    one_by_one = row_by_row(rows, ENV, translate_sample)
    assert all(type(r).__name__ == "SiftrSampleWire" for r in batch)
    assert [to_json(r) for r in batch] == [to_json(r) for r in one_by_one]  # type: ignore[arg-type]
    assert [to_msgpack(r) for r in batch] == [to_msgpack(r) for r in one_by_one]  # type: ignore[arg-type]
    assert {r["pid"] for r in batch if r["sock_cookie"] == 101} == {42, 43}
    assert {r["sport"] for r in batch if r["sock_cookie"] == 303} == {0, 41000}


def test_a_wire_row_reads_like_a_wire_dict_and_validates_into_its_record() -> None:
    rows = few_connections(3)
    row = translate_sample_batch(rows, ENV)[0]
    assert isinstance(row, WireRow)
    assert row["kind"] == row.kind == "siftr_sample"
    assert row["comm"] == "iperf3" and row["snd_cwnd"] == int(rows["snd_cwnd"][0]) * 65483
    record = as_struct(row)
    assert type(record) is SiftrSample
    assert to_json(record) == to_json(row)  # type: ignore[arg-type]


def test_wire_rows_get_their_own_approx_list_and_a_settable_seq() -> None:
    batch = translate_sample_batch(few_connections(4), ENV)
    assert batch[0]["approx"] is not batch[1]["approx"]
    assert kernel.number(batch, 7) == 11
    assert [r["seq"] for r in batch] == [7, 8, 9, 10]


@pytest.mark.parametrize("offset", [1_795_000_000.123, 1_700_000_000.0, 0.0, 1e9 + 0.3333333, -5.5, 1e12])
def test_the_wall_clock_column_rounds_exactly_like_the_row_form(offset: float) -> None:
    rng = np.random.default_rng(11)
    ties = np.arange(1, 20_001, 2, dtype=np.uint64) * 7_812_500  # x = j/128: x * 10**6 ends in .5
    ts = np.concatenate(
        [ties, np.arange(0, 20_000, dtype=np.uint64) * 500]
        + [rng.integers(0, scale, size=20_000, dtype=np.uint64) for scale in (2**33, 2**42, 2**50, 2**64 - 1)]
    )
    got = kernel.wall_column(ts, offset)
    assert got == [ENV.__class__("h", "b", offset).wall(t) for t in ts.tolist()]
    assert all(type(v) is float for v in got)


def test_the_column_wise_tcpdebug_batch_gives_the_row_by_row_records_byte_for_byte() -> None:
    from test_translators_kernel import random_rows

    from translators.tcpdebug import translate_debug, translate_debug_batch

    event_type = next(t for t, n in layout.EVENT_NAMES.items() if n == "tcpdebug_snapshot")
    rows = random_rows(event_type, 600, seed=3)
    rng = np.random.default_rng(3)
    rows["direction"] = rng.choice([0, 1, 2, 4], size=len(rows))  # TA_RESPOND is never emitted
    rows["prureq"] = rng.choice([0, 1, 5, 9, 0xFF, 200], size=len(rows))
    rows["flags"] = rng.choice([0, 0x80, 0x87], size=len(rows))
    rows["has_seg"], rows["approx"] = rng.integers(0, 2, size=len(rows)), rng.integers(0, 2, size=len(rows))
    rows["state"], rows["ca_state"] = rng.integers(0, 14, size=len(rows)), rng.integers(0, 6, size=len(rows))
    rows["rto_us"][::4] = 0
    env = KernelEnv(**{**ENV.__dict__, "drop_reasons": {2: "NOT_SPECIFIED"}})
    rows["drop_reason"][::2] = 2
    batch = translate_debug_batch(rows, env)
    one_by_one = row_by_row(rows, env, translate_debug)
    assert [to_json(r) for r in batch] == [to_json(r) for r in one_by_one]  # type: ignore[arg-type]
    all_valid = rows.copy()
    all_valid["flags"], all_valid["has_seg"] = 0x80, 1  # the unmasked path
    assert [to_json(r) for r in translate_debug_batch(all_valid, env)] == [
        to_json(r)  # type: ignore[arg-type]
        for r in row_by_row(all_valid, env, translate_debug)
    ]


def test_a_tcpdebug_batch_with_an_unknown_point_is_refused_for_the_row_path() -> None:
    from translators.tcpdebug import translate_debug_batch

    rows = np.zeros(
        3, dtype=layout.EVENT_DTYPES[next(t for t, n in layout.EVENT_NAMES.items() if n == "tcpdebug_snapshot")]
    )
    rows["direction"] = [0, 9, 1]
    with pytest.raises(ValueError, match="unknown TA_"):
        translate_debug_batch(rows, ENV)

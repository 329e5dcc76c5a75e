"""Retransmission runs for the state timeline (webapp/dashboard/retrans_runs.py)."""

from __future__ import annotations

from webapp.dashboard.retrans_runs import runs

S = 1_000_000_000  # ns


def rt(at_s: float, payload: int | None = 1448, kind: str | None = "rto") -> tuple[int, float, int | None, str | None]:
    return (int(at_s * S), 1000.0 + at_s, payload, kind)


def test_a_gap_of_more_than_a_second_or_a_state_change_starts_a_new_run() -> None:
    retrans = [rt(0.0), rt(0.5, kind="tlp"), rt(1.5), rt(2.6), rt(3.0, payload=None, kind=None), rt(3.2)]
    # 1.5 -> 2.6 is a gap over a second; the state change at 3.1 s cuts 3.0 from 3.2
    out = runs(retrans, breaks=[int(3.1 * S)])
    assert [ts for ts, _ in out] == [0, int(2.6 * S), int(3.2 * S)]
    items = [item for _, item in out]
    assert [(i["count"], i["bytes"], i["ts"], i["last"]) for i in items] == [
        (3, 3 * 1448, 1000.0, 1001.5),
        (2, 1448, 1002.6, 1003.0),
        (1, 1448, 1003.2, 1003.2),
    ]
    assert items[0]["kinds"] == {"rto": 2, "tlp": 1}
    assert items[0]["text"] == "3 segments retransmitted (2 rto, 1 tlp), 4,344 bytes"
    assert items[1]["text"] == "2 segments retransmitted (1 retransmission, 1 rto), 1,448 bytes"
    assert items[2]["text"] == "1 segment retransmitted (1 rto), 1,448 bytes"


def test_a_gap_of_exactly_a_second_continues_the_run_and_no_records_make_no_rows() -> None:
    assert [i["count"] for _, i in runs([rt(0.0), rt(1.0), rt(2.0)], breaks=[])] == [3]
    assert runs([], breaks=[5]) == []

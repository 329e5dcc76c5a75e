"""analysis/flows/live_summary.py on hand-built kernel record streams (no eBPF needed):
the conn_state and history each event sequence implies, in Structs and in the collector's
wire form. tests/test_collect_zeek_live.py checks the same against the wire, live."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from analysis.flows.live_summary import LiveSummaries
from translators import records as r

COOKIE = 77


def env(seq: int, **kw: Any) -> dict[str, Any]:
    return dict(host_id="h", boot_id="b", seq=seq, ts_ns=seq * 1000, ts_wall=1.0 + seq, sock_cookie=COOKIE, **kw)


def st(seq: int, prev: str, new: str, active: bool | None = None) -> r.Record:
    return r.TcpStateChange(**env(seq), provider="tcp", probe="state-change", prev_state=prev, state=new, active=active)


def rst(seq: int, sender: str) -> r.Record:
    return r.TcpReset(**env(seq), provider="tcp", probe="reset", sender=sender)


def sample(seq: int, direction: str, size: int, th_seq: int = 0, **kw: Any) -> r.Record:
    return r.SiftrSample(
        **env(seq), provider="siftr", probe="siftr", direction=direction, data_sz=size, th_seq=th_seq, **kw
    )


def summary(seq: int, acked: int = 0, received: int = 0) -> r.Connection:
    return r.Connection(
        **env(seq), provider="tcp", probe="destroy", proto="tcp", source="kernel", bytes_acked=acked,
        bytes_received=received, state="CLOSED",
    )  # fmt: skip


def fold(*recs: r.Record) -> tuple[str | None, str | None]:
    last = LiveSummaries().fold(list(recs))[-1]
    assert isinstance(last, r.Connection)
    return last.conn_state, last.history


def test_a_clean_connection_opened_here_with_samples() -> None:
    got = fold(
        st(1, "CLOSED", "SYN_SENT", True),
        st(2, "SYN_SENT", "ESTABLISHED"),
        sample(3, "out", 100, conn_state=4),
        sample(4, "in", 0),  # the peer's ACK: a pure ACK, as the next event is no FIN
        sample(5, "in", 50, th_seq=5001),
        st(6, "ESTABLISHED", "FIN_WAIT_1"),
        sample(7, "in", 0),  # the peer's FIN (tcp_probe has no flags): not an ACK letter
        st(8, "FIN_WAIT_1", "TIME_WAIT"),
        st(9, "TIME_WAIT", "CLOSED"),
        summary(10, acked=102, received=51),
    )
    assert got == ("SF", "ShADadFf")


def test_an_accepted_connection_reset_by_its_originator_without_samples() -> None:
    """tcp provider only: the data letter comes from the counters, after the handshake."""
    got = fold(
        st(1, "LISTEN", "SYN_RECEIVED", False),
        st(2, "SYN_RECEIVED", "ESTABLISHED"),
        rst(3, "peer"),
        st(4, "ESTABLISHED", "CLOSED"),
        summary(5, acked=0, received=1000),
    )
    assert got == ("RSTO", "ShADR")


def test_a_refused_connect_is_rej() -> None:
    assert fold(st(1, "CLOSED", "SYN_SENT", True), rst(2, "peer"), st(3, "SYN_SENT", "CLOSED"), summary(4)) == (
        "REJ",
        "Sr",
    )


def test_a_local_reset_after_both_fins_stays_sf() -> None:
    got = fold(
        st(1, "CLOSED", "SYN_SENT", True),
        st(2, "SYN_SENT", "ESTABLISHED"),
        st(3, "ESTABLISHED", "FIN_WAIT_1"),
        st(4, "FIN_WAIT_1", "FIN_WAIT_2"),
        st(5, "FIN_WAIT_2", "TIME_WAIT"),
        rst(6, "local"),
        summary(7, acked=2, received=1),
    )
    assert got == ("SF", "ShAFafR")


def test_zero_windows_and_retransmitted_peer_data() -> None:
    got = fold(
        st(1, "LISTEN", "SYN_RECEIVED", False),
        st(2, "SYN_RECEIVED", "ESTABLISHED"),
        sample(3, "in", 100, th_seq=1001),
        sample(4, "in", 100, th_seq=1201),  # 1101-1200 missing
        sample(5, "out", 0, conn_state=4, rcv_wnd=0),  # this side advertises a zero window
        sample(6, "in", 100, th_seq=1101),  # the retransmission fills the hole
        sample(7, "in", 0, snd_wnd=0),  # the peer's previous segment advertised a zero window
        summary(8, acked=0, received=300),
    )
    assert got == ("S1", "ShADawTW")


def test_polled_samples_add_no_letter_whatever_they_show() -> None:
    """siftr-poll's samples have no packet behind them (direction poll, no data_sz): a zero
    window or a non-empty send buffer at a poll is no segment, so no letter."""
    opened = (st(1, "CLOSED", "SYN_SENT", True), st(2, "SYN_SENT", "ESTABLISHED"))
    closed = (st(7, "ESTABLISHED", "CLOSED"), summary(8, acked=0, received=0))
    polls = (
        sample(3, "poll", None, th_seq=None, conn_state=4, snd_wnd=0, rcv_wnd=0),  # type: ignore[arg-type]
        sample(4, "poll", None, th_seq=None, conn_state=4, snd_wnd=65535, rcv_wnd=65535),  # type: ignore[arg-type]
    )
    assert fold(*opened, *polls, *closed) == fold(*opened, *closed)


def test_a_listener_and_an_unknown_socket_get_no_summary() -> None:
    assert fold(st(1, "CLOSED", "LISTEN"), st(2, "LISTEN", "CLOSED"), summary(3)) == (None, None)
    assert fold(summary(1, acked=10, received=10)) == (None, None)


@pytest.mark.parametrize("form", ["dict", "struct"])
def test_the_collectors_wire_dicts_are_filled_too(form: str) -> None:
    recs: list[Any] = [st(1, "CLOSED", "SYN_SENT", True), rst(2, "peer"), summary(3)]
    if form == "dict":
        recs = [msgspec.to_builtins(rec) for rec in recs]
    out = LiveSummaries().fold(recs)
    last = out[-1]
    got = (last["conn_state"], last["history"]) if form == "dict" else (last.conn_state, last.history)
    assert got == ("REJ", "Sr")


def test_a_connection_opened_before_tracing_says_its_originator_is_guessed() -> None:
    """Its opening was never seen (tracing began, or the collector restarted, after it):
    the local side is taken as the originator, and the summary says that is a guess."""
    before = LiveSummaries().fold(
        [st(1, "ESTABLISHED", "FIN_WAIT_1"), st(2, "FIN_WAIT_1", "FIN_WAIT_2"), st(3, "FIN_WAIT_2", "TIME_WAIT"),
         summary(4, acked=1, received=1)]
    )[-1]  # fmt: skip
    assert isinstance(before, r.Connection) and before.direction_guessed is True
    seen = LiveSummaries().fold([st(1, "CLOSED", "SYN_SENT", True), rst(2, "peer"), summary(3)])[-1]
    assert isinstance(seen, r.Connection) and seen.direction_guessed is False

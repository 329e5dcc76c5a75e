"""The both-ends rule shared by the connection page and the Connections list
(webapp/dashboard/stitch_match.py), on unsaved rows: which rows of a page fold into
which, when a 4-tuple was reused, when lifetimes are too far apart, and rows that are
never an end (a listener without a peer address, an uploaded capture's flow)."""

from __future__ import annotations

from webapp.dashboard import stitch_match
from webapp.traces.models import Connection

CLIENT = ("10.0.0.1", 40000, "10.0.0.2", 443)
SERVER = ("10.0.0.2", 443, "10.0.0.1", 40000)


def row(pk: int, host: str, ends: tuple[str, int, str | None, int | None], t: float, active: bool | None) -> Connection:
    src, sport, dst, dport = ends
    return Connection(
        pk=pk, host_id=host, boot_id="b", conn_uuid=f"u{pk}", proto="tcp", src=src, sport=sport, dst=dst, dport=dport,
        first_seen=t, last_seen=t + 1.0, active=active,
    )  # fmt: skip


def test_a_reused_tuple_pairs_each_end_with_the_closest_start_and_keeps_the_openers_rows() -> None:
    # Newest first, as the list sorts: two connections on one tuple, 100 s apart.
    rows = [
        row(4, "b", SERVER, 100.2, False),
        row(3, "a", CLIENT, 100.0, True),
        row(2, "b", SERVER, 0.2, False),
        row(1, "a", CLIENT, 0.0, True),
        row(5, "a", ("10.0.0.1", 40001, "10.0.0.2", 443), 0.0, True),  # no other end
    ]
    got = stitch_match.fold(rows)
    assert [c.pk for c in got.rows] == [3, 1, 5]
    assert {k: v.pk for k, v in got.peers.items()} == {3: 4, 1: 2}
    assert got.folded == 2


def test_the_opener_is_kept_whichever_comes_first_and_an_unknown_opener_beats_the_acceptor() -> None:
    got = stitch_match.fold([row(1, "b", SERVER, 0.0, False), row(2, "a", CLIENT, 0.0, None)])
    assert ([c.pk for c in got.rows], {k: v.pk for k, v in got.peers.items()}) == ([2], {2: 1})


def test_far_apart_lifetimes_listeners_and_captures_are_never_paired() -> None:
    window = stitch_match.WINDOW
    apart = [row(1, "a", CLIENT, 0.0, True), row(2, "b", SERVER, 1.0 + window + 0.5, False)]
    near = [row(1, "a", CLIENT, 0.0, True), row(2, "b", SERVER, 1.0 + window - 0.5, False)]
    listener = [row(1, "a", ("10.0.0.2", 443, None, None), 0.0, False), row(2, "a", CLIENT, 0.0, True)]
    capture = [row(1, "capture:x.pcap", CLIENT, 0.0, True), row(2, "b", SERVER, 0.0, False)]
    assert [stitch_match.fold(r).folded for r in (apart, near, listener, capture)] == [0, 1, 0, 0]

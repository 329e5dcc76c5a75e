"""Kernel tests of tcp --tcp-fold (kmod/fold.bpf.h, translators/tcp_lifecycle.py): the same
loopback traffic traced by two sessions at once, one streaming (today's default records),
one folding. For every socket, the folded session's records with its tcp_lifecycle records
expanded equal the streamed session's: states and their order, congestion state, final
counters, siftr's flow counters and the owner. A short connection is one record per end;
one held open past the fold window is flushed by siftr-poll and streams after.

Real eBPF programs, real loopback traffic made here, filtered on this test's port.
"""

from __future__ import annotations

import os
import socket
import struct
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest

from collector.bpf import layout
from nettrail.commands.collect import status_record
from tests import kernel_expect
from tests.kernel_support import RING_SLOTS, Capture, bound_listener, cookie_of, kernel, my_comm, tracing
from translators.kernel import KernelEnv, as_struct
from translators.records import Record
from translators.tcp_lifecycle import expand

pytestmark = [*kernel, pytest.mark.matrix]

PROVIDERS = ("tcp", "siftr-poll")  # siftr-poll's iterator flushes the folds (its own run without it)
FOLDED = ("tcp_state", "tcp_cong_state", "flow_counters", "connection")  # what a lifecycle stands for
WINDOW_S = 0.3  # short, so the long-lived connection outlives it quickly
SHORT = 4


@contextmanager
def two_sessions(
    port: int, poll_interval: float, providers: tuple[str, ...] = PROVIDERS
) -> Iterator[tuple[Capture, Capture]]:
    """poll_interval: siftr-poll's, each session's own (its first poll at once)."""
    with ExitStack() as stack:
        streamed = stack.enter_context(tracing(providers, port=port, poll_interval=poll_interval))
        folded = stack.enter_context(
            tracing(providers, port=port, poll_interval=poll_interval, tcp_fold=True, fold_window=WINDOW_S)
        )
        assert folded.lost("tcp", "tcp_lifecycle") == (not kernel_expect.FOLD), folded.session.degraded
        yield streamed, folded


def off_before_5_11(providers: tuple[str, ...] = PROVIDERS) -> bool:
    """Whether --tcp-fold is off on this kernel, as pinned: before Linux 5.11 (Debian 11's
    5.10) no tracing program may use socket storage. Then it is said with its reason in
    collector_status.degraded (and on stderr, from the same list), and the folded
    session's records are the streamed session's, with no lifecycle."""
    if kernel_expect.FOLD:
        return False
    listener = bound_listener()
    port = listener.getsockname()[1]
    with two_sessions(port, poll_interval=60.0, providers=providers) as (streamed, folded):
        env = KernelEnv(host_id="test-host", boot_id="test-boot", wall_offset=0.0)
        status = as_struct(status_record(folded.session, env, stack_counters=False))
        assert status.degraded["tcp"]["tcp_lifecycle"] == kernel_expect.FOLD_OFF  # type: ignore[attr-defined]
        listener.listen(1)
        ends = exchange(listener, port)
        listener.close()
        for cap in (streamed, folded):
            cap.wait_for(lambda rs: set(ends) <= {r.sock_cookie for r in rs if r.kind == "connection"})
            cap.settle()
    assert not folded.of("tcp_lifecycle") and not streamed.of("tcp_lifecycle")
    assert set(ends) <= set(per_socket(folded.records, False))
    assert_same_lifecycles(streamed.records, folded.records)
    return True


def exchange(listener: socket.socket, port: int, linger0: bool = False) -> tuple[int, int]:
    """connect, 100 bytes each way, close (the client first; with linger0 an abort)."""
    client = socket.create_connection(("127.0.0.1", port))
    server, _ = listener.accept()
    cookies = cookie_of(client), cookie_of(server)
    client.sendall(b"x" * 100)
    assert len(server.recv(100)) == 100
    server.sendall(b"y" * 100)
    assert len(client.recv(100)) == 100
    if linger0:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()
    try:
        server.recv(10)  # the FIN arrived
    except ConnectionResetError:
        assert linger0  # the reset did
    server.close()
    return cookies


def view(rec: Record) -> tuple[Any, ...]:
    """What a streamed record and its folded form must agree on (times apart: each
    session reads its own clock; cpu: the fold does not keep it per change)."""
    # a streamed CLOSED -> SYN_SENT has no local port yet (connect() binds it after); an
    # expanded change has the socket's 4-tuple at the lifecycle
    unbound = rec.kind == "tcp_state" and rec.prev_state == "CLOSED" and rec.state == "SYN_SENT"  # type: ignore[attr-defined]
    sport = None if unbound else rec.sport  # type: ignore[attr-defined]
    common = (rec.kind, rec.conn_uuid, rec.src, sport, rec.dst, rec.dport, rec.tgid, rec.comm, rec.uid)  # type: ignore[attr-defined]
    if rec.kind == "tcp_state":
        return (*common, rec.ctx, rec.prev_state, rec.state, rec.linux_prev_state, rec.linux_state,  # type: ignore[attr-defined]
                rec.inferred, rec.active, rec.caused_by, rec.approx)  # type: ignore[attr-defined]  # fmt: skip
    if rec.kind == "tcp_cong_state":
        return (*common, rec.ctx, rec.prev_ca_state, rec.ca_state, rec.snd_cwnd, rec.snd_ssthresh)  # type: ignore[attr-defined]
    if rec.kind == "flow_counters":  # samples: each session's own polls (assert_samples_counted)
        return (*common, rec.packets_in, rec.packets_out, rec.bytes_in, rec.bytes_out, rec.skbs)  # type: ignore[attr-defined]
    return (*common, rec.ctx, rec.cpu, rec.state, rec.bytes_acked, rec.bytes_received, rec.segs_in, rec.segs_out,  # type: ignore[attr-defined]
            rec.total_retrans, rec.lifetime_ns is not None)  # type: ignore[attr-defined]  # fmt: skip


def per_socket(records: list[Record], expanded: bool) -> dict[int, list[Record]]:
    """A session's FOLDED kinds by socket, in ring order; `expanded`: its lifecycles expanded in place."""
    out: dict[int, list[Record]] = {}
    for rec in records:
        if rec.kind == "tcp_lifecycle" and expanded:
            out.setdefault(rec.sock_cookie or 0, []).extend(expand(rec))
        elif rec.kind in FOLDED:
            out.setdefault(rec.sock_cookie or 0, []).append(rec)
    return out


def assert_accounted(cap: Capture) -> None:
    """received + lost = generated for every ring event type, none lost."""
    counters = cap.session.counters().sum(axis=0)
    generated, lost = counters[0, RING_SLOTS], counters[1, RING_SLOTS]
    assert (cap.source.received[RING_SLOTS] + lost == generated).all()
    assert int(lost.sum()) == 0


def assert_samples_counted(cap: Capture) -> None:
    """Each flow's samples are the siftr_sample records of its socket in the same session."""
    samples = Counter(r.sock_cookie for r in cap.records if r.kind == "siftr_sample")
    flows = per_socket(cap.records, True)
    counted = {c: r.samples for c, recs in flows.items() for r in recs if r.kind == "flow_counters"}  # type: ignore[attr-defined]
    assert counted == {c: samples[c] for c in counted}


def assert_same_lifecycles(streamed: list[Record], folded: list[Record]) -> None:
    want, got = per_socket(streamed, False), per_socket(folded, True)
    assert sorted(got) == sorted(want)
    for cookie, recs in want.items():
        assert [view(r) for r in got[cookie]] == [view(r) for r in recs], cookie
    # times: each session reads its own clock (apart by a program's run, milliseconds under
    # QEMU's emulation), so they are not compared across sessions; the folded ones keep
    # their order, to the microsecond after the first change, and end at the lifecycle
    for rec in folded:
        if rec.kind == "tcp_lifecycle":
            times = [r.ts_ns for r in expand(rec)]
            assert times == sorted(times) and times[-1] <= rec.ts_ns
            changes = [r.ts_ns for r in expand(rec) if r.kind in ("tcp_state", "tcp_cong_state")]
            assert {(t - rec.born_ns) % 1000 for t in changes} <= {0}  # type: ignore[attr-defined]


def test_folded_short_connections_expand_to_the_streamed_records_and_make_one_record_per_end() -> None:
    if off_before_5_11():
        return
    listener = bound_listener()
    port = listener.getsockname()[1]
    with two_sessions(port, poll_interval=60.0) as (streamed, folded):  # no poll, no flush under way
        listener.listen(SHORT + 1)
        ends = [exchange(listener, port) for _ in range(SHORT)]
        aborted = exchange(listener, port, linger0=True)
        listener.close()
        sockets = {c for pair in [*ends, aborted] for c in pair}
        for cap in (streamed, folded):  # every end destroyed, then every event read
            cap.wait_for(lambda rs: sockets <= {r.sock_cookie for r in rs if r.kind in ("connection", "tcp_lifecycle")})
            cap.settle()
            assert_accounted(cap)
        lifecycles_sent = int(folded.session.counters().sum(axis=0)[0, layout.EV_LIFECYCLE])
    want, got = streamed.records, folded.records
    assert_same_lifecycles(want, got)
    assert_samples_counted(streamed)
    assert_samples_counted(folded)
    # the final flow counters H2 counts segments from (KernelSource.counter_records): the same
    finals = [sorted(view(r) for r in map(as_struct, cap.source.counter_records) if r.kind == "flow_counters")
              for cap in (streamed, folded)]  # fmt: skip
    assert finals[0] == finals[1] and len(finals[0]) == 2 * (SHORT + 1)

    short = {c for pair in ends for c in pair}
    kinds_streamed = Counter(r.kind for r in want if r.sock_cookie in short and r.kind != "siftr_sample")
    kinds_folded = Counter(r.kind for r in got if r.sock_cookie in short and r.kind != "siftr_sample")
    # per short connection (both ends): 11 state changes (TIME_WAIT inferred), 1 congestion
    # state, 2 flow counters, 2 connection records streamed; 2 lifecycles folded
    assert kinds_streamed == {"tcp_state": 11 * SHORT, "tcp_cong_state": SHORT, "flow_counters": 2 * SHORT,
                              "connection": 2 * SHORT}  # fmt: skip
    assert kinds_folded == {"tcp_lifecycle": 2 * SHORT}
    lifecycles = [r for r in got if r.kind == "tcp_lifecycle" and r.sock_cookie in short]
    assert {r.partial for r in lifecycles} == {False}  # type: ignore[attr-defined]
    assert {(r.tgid, r.comm) for r in lifecycles} == {(os.getpid(), my_comm())}
    client, server = ends[0]
    by_cookie = {r.sock_cookie: r for r in lifecycles}
    assert by_cookie[client].state_path == "SYN_SENT ESTABLISHED FIN_WAIT_1 FIN_WAIT_2 CLOSED"  # type: ignore[attr-defined]
    assert by_cookie[server].state_path == "SYN_RECEIVED ESTABLISHED CLOSE_WAIT LAST_ACK CLOSED"  # type: ignore[attr-defined]
    assert (by_cookie[client].bytes_sent, by_cookie[server].bytes_received) == (100, 100 + 1)  # type: ignore[attr-defined]
    # resets are never folded: the abort's reset sent and reset received are records in both
    resets = [sorted((r.sock_cookie, r.sender) for r in recs if r.kind == "tcp_reset") for recs in (want, got)]  # type: ignore[attr-defined]
    assert resets[0] == resets[1] == sorted([(aborted[0], "local"), (aborted[1], "peer")])
    # ... and the fold sums them up: the last reset's side and state, when after born_ns
    ends_of = {r.sock_cookie: r for r in got if r.kind == "tcp_lifecycle" and r.sock_cookie in aborted}
    summed = [(ends_of[c].resets, ends_of[c].reset_sender, ends_of[c].reset_state) for c in aborted]  # type: ignore[attr-defined]
    streamed_resets = {r.sock_cookie: (r.sender, r.state) for r in want if r.kind == "tcp_reset"}  # type: ignore[attr-defined]
    assert summed == [(1, *streamed_resets[c]) for c in aborted]
    assert [x[1] for x in summed] == ["local", "peer"] and summed[1][2] == "ESTABLISHED"
    # its time: the folded session's own reset record's, to the microsecond after born_ns
    reset_at = {r.sock_cookie: r.ts_ns for r in got if r.kind == "tcp_reset"}
    assert [ends_of[c].reset_us for c in aborted] == [(reset_at[c] - ends_of[c].born_ns) // 1000 for c in aborted]  # type: ignore[attr-defined]
    assert {(r.resets, r.retransmits) for r in lifecycles} == {(0, 0)}  # type: ignore[attr-defined]
    # every lifecycle the kernel sent is here (the listener's too)
    assert lifecycles_sent == len([r for r in got if r.kind == "tcp_lifecycle"])


def test_a_connection_held_past_the_fold_window_is_flushed_by_the_poll_and_then_streams() -> None:
    if off_before_5_11():
        return
    listener = bound_listener()
    port = listener.getsockname()[1]
    with two_sessions(port, poll_interval=0.1) as (streamed, folded):
        listener.listen(1)
        client = socket.create_connection(("127.0.0.1", port))
        server, _ = listener.accept()
        cookies = {cookie_of(client), cookie_of(server)}
        client.sendall(b"x" * 100)
        assert len(server.recv(100)) == 100

        def flushed(rs: list[Record]) -> bool:
            return cookies <= {r.sock_cookie for r in rs if r.kind == "tcp_lifecycle" and r.partial}  # type: ignore[attr-defined]

        folded.wait_for(flushed, timeout=10)
        assert flushed(folded.records), "no partial lifecycle while the connection was open"
        server.sendall(b"y" * 100)
        assert len(client.recv(100)) == 100
        client.close()
        server.recv(10)
        server.close()
        listener.close()
        for cap in (streamed, folded):
            cap.wait_for(lambda rs: cookies <= {r.sock_cookie for r in rs if r.kind == "connection"})
            cap.settle()
            assert_accounted(cap)
    assert_same_lifecycles(streamed.records, folded.records)
    assert_samples_counted(streamed)
    assert_samples_counted(folded)
    partial = [r for r in folded.records if r.kind == "tcp_lifecycle" and r.sock_cookie in cookies]
    assert sorted(r.state_path for r in partial) == ["SYN_RECEIVED ESTABLISHED", "SYN_SENT ESTABLISHED"]  # type: ignore[attr-defined]
    # flushed once its fold was older than the window, by the kernel's own clock
    assert all(r.ts_ns - r.born_ns >= WINDOW_S * 1e9 for r in partial)  # type: ignore[attr-defined]
    # after the flush the socket streams: its close is state records and a connection record
    after = [r.kind for r in folded.records if r.sock_cookie in cookies and r.kind in FOLDED]
    assert Counter(after) == {"tcp_state": 4 + 3, "connection": 2, "flow_counters": 2}


@pytest.mark.parametrize("providers", [("tcp",), ("tcp", "siftr")])
def test_without_siftr_poll_the_fold_is_flushed_by_its_own_run_of_the_iterator(providers: tuple[str, ...]) -> None:
    """The iterator runs for the fold alone (every FOLD_POLL_S or the window): a short
    connection is one record per end, one held open is flushed within the window plus a
    run, and the iterator makes no siftr-poll samples."""
    if off_before_5_11(providers):
        return
    listener = bound_listener()
    port = listener.getsockname()[1]
    with two_sessions(port, poll_interval=0.1, providers=providers) as (streamed, folded):
        assert folded.source.siftr_poller is not None and streamed.source.siftr_poller is None
        assert folded.source.siftr_poller.interval_s == WINDOW_S
        listener.listen(2)
        ends = exchange(listener, port)
        client = socket.create_connection(("127.0.0.1", port))
        server, _ = listener.accept()
        held = {cookie_of(client), cookie_of(server)}

        def flushed(rs: list[Record]) -> bool:
            return held <= {r.sock_cookie for r in rs if r.kind == "tcp_lifecycle" and r.partial}  # type: ignore[attr-defined]

        folded.wait_for(flushed, timeout=10)
        assert flushed(folded.records), "no partial lifecycle while the connection was open"
        client.close()
        server.recv(10)
        server.close()
        listener.close()
        sockets = {*ends, *held}
        for cap in (streamed, folded):
            cap.wait_for(lambda rs: sockets <= {r.sock_cookie for r in rs if r.kind in ("connection", "tcp_lifecycle")}
                         and held <= {r.sock_cookie for r in rs if r.kind == "connection"})  # fmt: skip
            cap.settle()
            assert_accounted(cap)
    assert_same_lifecycles(streamed.records, folded.records)
    kinds = Counter(r.kind for r in folded.records if r.sock_cookie in ends and r.kind != "siftr_sample")
    assert kinds == {"tcp_lifecycle": 2}
    if "siftr" not in providers:
        assert not folded.of("siftr_sample")

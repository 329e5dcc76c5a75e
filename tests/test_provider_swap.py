"""Kernel tests of collector/bpf/swap.py: when the dashboard's request (the ingest answer's
"tracing" member, kept by the HTTP sink) changes what runs, the new programs are loaded
while the old ones run; a request that cannot be traced is said once and changes nothing.
The whole path through `nettrail up` is tests/test_nettrail_up.py's
test_staff_change_what_the_local_collector_traces_from_the_dashboard."""

from __future__ import annotations

import http.server
import json
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from collector.bpf.loader import Filters, KernelSession, Options
from collector.bpf.source import KernelSource, wall_offset
from collector.bpf.swap import COMMAND_LINE, DASHBOARD, Swap
from tests.collect_process import Collector
from tests.kernel_support import Capture, bound_listener, cookie_of, kernel, my_comm
from translators.kernel import KernelEnv
from translators.records import decode_batch

pytestmark = kernel


@dataclass
class Answers:
    """What the HTTP sink keeps of its newest 200: (answered, the "tracing" member)."""

    tracing: tuple[bool, Any] = (False, None)


def test_nothing_is_prepared_until_a_request_differs_from_what_runs(capsys: pytest.CaptureFixture[str]) -> None:
    own = Options(providers=("tcp",))
    answers = Answers()
    swap = Swap(answers, own)
    assert not swap.due(own)  # no answer yet
    answers.tracing = (True, None)  # the collector's own choice: runs already
    assert not swap.due(own)
    answers.tracing = (True, {"providers": ["tcp"], "skb_sample": None})  # the same set
    assert not swap.due(own)
    assert swap.take() is None and capsys.readouterr().err == ""


@pytest.mark.matrix  # the swap on Debian 12's 6.1 and 6.12 too (tests/kernel_matrix.py)
def test_a_changed_request_is_loaded_but_runs_only_once_attached() -> None:
    own = Options(providers=("tcp",))
    answers = Answers((True, {"providers": ["tcp", "udp"], "skb_sample": None}))
    swap = Swap(answers, own)
    with KernelSession(own) as running:
        assert swap.due(running.opts) and swap.origin == DASHBOARD
        following = swap.next
        assert following is not None
        try:
            assert following.opts.providers == ("tcp", "udp")
            assert following.links == {} and following.reader is not None  # loaded and its ring mapped, not attached
            assert "udp_fail_queue_rcv_skb" in following.program_ids()
            assert running.links  # the old programs still run
            swap.switch(running)
            assert running.links == {} and set(following.links) == set(following.loaded_names())
            assert running.reader is not None  # the old ring stays readable for its drain
            assert swap.untraced_ns > 0 and not swap.failed
            assert swap.take() is following and swap.take() is None
        finally:
            following.close()
    answers.tracing = (True, None)  # back to the command line's set
    assert swap.due(Options(providers=("tcp", "udp"))) and swap.origin == COMMAND_LINE
    back = swap.take()
    assert back is not None
    back.close()


@pytest.mark.matrix
def test_sockets_keep_their_owners_across_a_swap() -> None:
    """A listener bound and a connection made before the swap: after it, the listener's
    new child (established in softirq, inheriting the listener's owner) and the old
    connection's CLOSE_WAIT (the peer's FIN, in softirq) are still this process's; a
    session that did not take over the owner maps would know neither."""
    listener = bound_listener()
    port = listener.getsockname()[1]
    own = Options(providers=("tcp",), filters=Filters(port=port))
    answers = Answers((True, {"providers": ["tcp", "skb"], "skb_sample": None}))
    swap = Swap(answers, own)
    env = KernelEnv(host_id="test-host", boot_id="test-boot", wall_offset=wall_offset())
    sockets = [listener]
    with KernelSession(own) as running:
        listener.listen(4)
        old_client = socket.create_connection(("127.0.0.1", port))
        old_server, _ = listener.accept()
        sockets += [old_client, old_server]
        old_client.sendall(b"x")
        assert old_server.recv(1) == b"x"
        assert swap.due(running.opts, running)
        following = swap.next
        assert following is not None
        try:
            swap.switch(running)
            cap = Capture(following, KernelSource(following, env, flow_interval=3600.0))
            sockets.append(socket.create_connection(("127.0.0.1", port)))
            new_server, _ = listener.accept()
            sockets.append(new_server)
            child_cookie, old_cookie = cookie_of(new_server), cookie_of(old_client)
            old_server.close()  # its FIN moves old_client to CLOSE_WAIT in softirq
            cap.wait_for(lambda recs: bool(_states_of(recs, child_cookie) and _closing(recs, old_cookie)))
            records = cap.settle()
        finally:
            following.close()
            for s in sockets:
                s.close()
    child, closing = _states_of(records, child_cookie), _closing(records, old_cookie)
    assert child and closing
    for r in [*child, *closing]:
        assert (r.pid, r.comm) == (os.getpid(), my_comm()), r
        if r.ctx != "task":  # softirq: the owner came from the maps taken over
            assert r.attribution == "owner-map", r
    assert "softirq" in {r.ctx for r in [*child, *closing]}  # what only the maps could attribute
    assert "softirq" in {r.ctx for r in [*child, *closing]}


@pytest.mark.parametrize("taken_over", [True, False])
def test_a_connection_across_a_swap_keeps_its_history_and_opener(taken_over: bool) -> None:
    """Opened before the swap, closed after it: the new session's source goes on from what
    the old one knew of the socket (KernelSource.take_over, as `nettrail collect` does at a
    swap), so its summary's Zeek history starts with the SYN seen before, and its opener
    is known. Without that, the opening is unseen and the opener a guess, which it says."""
    listener = bound_listener()
    port = listener.getsockname()[1]
    own = Options(providers=("tcp",), filters=Filters(port=port))
    swap = Swap(Answers((True, {"providers": ["tcp", "skb"], "skb_sample": None})), own)
    env = KernelEnv(host_id="test-host", boot_id="test-boot", wall_offset=wall_offset())
    sockets = [listener]
    with KernelSession(own) as running:
        old = Capture(running, KernelSource(running, env, flow_interval=3600.0))
        listener.listen(4)
        client = socket.create_connection(("127.0.0.1", port))
        server, _ = listener.accept()
        sockets += [client, server]
        cookie, client_port = cookie_of(client), client.getsockname()[1]
        old.wait_for(
            lambda recs: any(
                r.kind == "tcp_state" and r.sock_cookie == cookie and r.state == "ESTABLISHED" for r in recs
            )
        )
        assert swap.due(running.opts, running) and swap.next is not None
        following = swap.next
        try:
            swap.switch(running)
            old.records.extend(old.source.poll(final=True))  # the old ring's drain
            new = Capture(following, KernelSource(following, env, flow_interval=3600.0))
            if taken_over:
                new.source.take_over(old.source)
            client.close()
            server.close()
            records = new.wait_for(lambda recs: any(r.kind == "connection" and r.sock_cookie == cookie for r in recs))
        finally:
            following.close()
            for s in sockets:
                s.close()
    [summary] = [r for r in records if r.kind == "connection" and r.sock_cookie == cookie]
    if taken_over:
        got = (summary.direction_guessed, summary.history[:3], summary.sport)  # type: ignore[attr-defined]
        assert got == (False, "ShA", client_port), summary
    else:
        assert summary.direction_guessed is True and not summary.history.startswith("S"), summary  # type: ignore[attr-defined]


def _states_of(records: list[Any], cookie: int) -> list[Any]:
    return [r for r in records if r.kind == "tcp_state" and r.sock_cookie == cookie]


def _closing(records: list[Any], cookie: int) -> list[Any]:
    return [r for r in _states_of(records, cookie) if r.state == "CLOSE_WAIT"]


def test_a_request_that_cannot_be_traced_is_said_once_and_changes_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    own = Options(providers=("tcp",), object_path=Path("/nonexistent/nettrail.bpf.o"))
    answers = Answers((True, {"providers": ["tcp", "udp"]}))
    swap = Swap(answers, own)
    assert not swap.due(own) and swap.take() is None
    err = capsys.readouterr().err
    assert "cannot trace tcp,udp as the dashboard asks: failed to open /nonexistent/nettrail.bpf.o" in err
    assert "still tracing tcp" in err
    assert not swap.due(own) and capsys.readouterr().err == ""  # not tried (nor said) again
    answers.tracing = (True, {"providers": ["tcp", "everything"]})
    assert not swap.due(own)
    assert "ignoring the server's tracing request: providers: unknown everything" in capsys.readouterr().err


class _Flipping(http.server.BaseHTTPRequestHandler):
    """An ingest server whose every answer asks for the other set: the collector swaps
    after each batch, and each swap's collector_status makes the next batch."""

    sets = (["tcp"], ["tcp", "skb"])
    answers = 0

    stats: list[Any] = []  # the collector_stats received, in order

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        cls = type(self)
        cls.answers += 1
        cls.stats.extend(r for r in decode_batch(body, "msgpack") if r.kind == "collector_stats")
        body = json.dumps({"stored": 0, "duplicates": 0, "tracing": {"providers": cls.sets[cls.answers % 2]}})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


def test_duration_bounds_the_whole_run_however_often_the_set_is_swapped(tmp_path: Path) -> None:
    """--duration 4 while the server asks for another set at every answer: the collector
    swaps again and again, and still stops on its own. Were the duration counted from each
    swap, it would never end (the bound below is only the test's patience)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flipping)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    collector = Collector(
        "--providers", "tcp", "--duration", "4", "--server", url, "--token", "t", "--spool", str(tmp_path),
        "--providers-from-server", "--no-stack-counters",
    )  # fmt: skip
    try:
        rc = collector.proc.wait(timeout=180)
    finally:
        if collector.proc.poll() is None:
            collector.proc.kill()
            collector.proc.wait()
        server.shutdown()
        thread.join()
    err = collector.proc.stderr.read().decode() if collector.proc.stderr else ""
    assert rc == 0, err
    assert "tracing tcp,skb (programs" in err, err  # it followed the requests
    # each swap ends a session with its collector_stats; only the last says the collector
    # stopped (nothing follows its alerts after it), not those of the swaps
    swaps = err.count("tracing tcp")
    stopped = [r.stopped for r in _Flipping.stats]
    assert swaps >= 2 and len(stopped) >= swaps
    assert stopped == [None] * (len(stopped) - 1) + [True]

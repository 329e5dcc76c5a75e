"""Kernel tests of siftr-poll, siftr's always-on mode: no program on any packet's path, each
TCP socket's control block read every --poll-interval by an iterator the collector runs
in every network namespace (collector/bpf/poll.py, kmod/siftr_poll.bpf.c).

Real traffic in a namespace of its own (tests/siftr_poll_traffic.py under `unshare -n`,
which the poller finds through the process): a receiver that stops reading, so the
sender's peer advertises a zero window for 1.6 s, and an idle connection beside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict

import pytest

from analysis.alerts.engine import run
from collector.bpf import poll
from collector.bpf.loader import BpfError, KernelSession, Options
from tests.alert_kernel_support import final, pick
from tests.collect_process import ROOT
from tests.kernel_support import attached_tracepoints, kernel, short_connections, tracing
from tests.siftr_poll_traffic import TOTAL
from translators.records import Alert, FlowCounters, Record, SiftrSample

pytestmark = kernel

PER_PACKET = {"tcp_probe", "net_dev_queue", "netif_receive_skb"}
# what a poll judges a socket by: a sample is taken only when one of these moved, or data waits
JUDGED = ("snd_una", "snd_nxt", "snd_cwnd", "snd_wnd", "rcv_wnd", "srtt", "conn_state", "ca_state")


def netns_of(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def traffic_in_own_netns(cap) -> tuple[dict, int, int]:
    """Run the traffic under `unshare -n` while the session polls; (its JSON, pid, netns)."""
    code = "import sys; sys.path.insert(0, '.'); from tests.siftr_poll_traffic import main; main()"
    proc = subprocess.Popen(
        ["unshare", "-n", "sh", "-c", f'ip link set lo up && exec "{sys.executable}" -c "{code}"'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    end = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < end:
        cap.drain()
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    told = json.loads(out)
    return told, proc.pid, told["netns"]


def moved(a: SiftrSample, b: SiftrSample) -> bool:
    return any(getattr(a, f) != getattr(b, f) for f in JUDGED)


@pytest.fixture(autouse=True)
def unpaced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Polls every 0.1 s however long one takes (under QEMU's TCG a walk of the kernel's
    hash is slow): these tests are about what a poll samples, tests/test_siftr_poller.py
    about the pacing."""
    monkeypatch.setattr(poll, "POLL_CPU_SHARE", 1.0)


@pytest.mark.matrix
def test_polls_sample_each_socket_when_it_moves_and_keep_its_counts_exactly() -> None:
    with tracing(("tcp", "siftr-poll"), poll_interval=0.1, counts_every=0.5) as cap:
        # no program on a packet's path: the iterator and the state and call hooks only
        assert attached_tracepoints(cap.session) & PER_PACKET == set()
        assert "siftr_poll" in cap.session.links
        told, pid, inode = traffic_in_own_netns(cap)
        records = cap.settle(patience=1.0)
    assert inode and inode != netns_of(os.getpid())
    mine = [r for r in records if r.netns == inode]
    samples = [r for r in mine if isinstance(r, SiftrSample)]
    assert samples and {r.direction for r in samples} == {"poll"}
    assert {(r.th_seq, r.th_ack, r.data_sz) for r in samples} == {(None, None, None)}  # no packet behind a poll
    assert {r.tgid for r in samples} == {pid}  # the sockets' user, not the polling collector
    by_socket: dict[int | None, list[SiftrSample]] = defaultdict(list)
    for r in samples:
        by_socket[r.sock_cookie].append(r)
    for series in by_socket.values():
        for before, after in zip(series, series[1:], strict=False):
            # a poll that found nothing moved and nothing waiting emitted nothing
            assert moved(before, after) or after.snd_buf_cc or after.rcv_buf_cc, (before, after)
    sender = told["sender"]
    sent = [r for r in samples if (r.sport, r.dport) == (sender["sport"], sender["dport"])]
    stalled = [r.ts_wall for r in sent if r.snd_wnd == 0 and r.snd_buf_cc]
    assert stalled and max(stalled) - min(stalled) >= 1.0  # the zero window, seen from the sender, held >= 1 s
    # the exact counters: the socket's own, read by the iterator and again at its destruction
    finals = {
        (r.sport, r.dport): r for r in mine if isinstance(r, FlowCounters) and r.hook == "tp_btf/tcp_destroy_sock"
    }
    out, back = finals[(sender["sport"], sender["dport"])], finals[(sender["dport"], sender["sport"])]
    assert (out.bytes_out, out.bytes_in) == (sender["bytes_sent"], sender["bytes_received"])
    assert out.bytes_out == TOTAL + sender["bytes_retrans"] and back.bytes_in == TOTAL + 1  # + the FIN
    assert out.samples == len(sent)
    idle = told["idle"]
    assert len([r for r in samples if (r.sport, r.dport) == (idle["sport"], idle["dport"])]) <= 4


@pytest.mark.matrix
def test_connections_shorter_than_a_poll_interval_get_their_exact_final_counts() -> None:
    """No poll catches them, but each reached ESTABLISHED (noted in `polled`), so its
    destruction reports its own counters: what `nettrail up`'s connection rows show."""
    with tracing(("tcp", "siftr-poll"), poll_interval=30.0, counts_every=0.5) as cap:
        cap.drain()  # the first poll, before the connections
        port = short_connections(20, 10_000)
        records = cap.settle(patience=1.0)
    finals = [r for r in records if isinstance(r, FlowCounters) and port in (r.sport, r.dport)]
    clients = [r for r in finals if r.dport == port]
    servers = [r for r in finals if r.sport == port]
    assert len(clients) == len(servers) == 20  # the listener, never established, has none
    assert {(r.bytes_out, r.samples, r.hook) for r in clients} == {(10_000, 0, "tp_btf/tcp_destroy_sock")}
    # the data, and the client's FIN where it came before the server's socket (closed first) ended
    assert {r.bytes_in for r in servers} <= {10_000, 10_001}
    assert all(r.skbs == r.packets_in + r.packets_out for r in finals)  # H2: segments, none sampled
    assert not [r for r in records if isinstance(r, SiftrSample) and port in (r.sport, r.dport)]


def test_the_zero_window_story_raises_k13_from_polled_samples() -> None:
    with tracing(("tcp", "siftr-poll"), poll_interval=0.1, counts_every=0.5) as cap:
        told, _, inode = traffic_in_own_netns(cap)
        records = cap.settle(patience=1.0)
    mine: list[Record] = sorted((r for r in records if r.netns == inode), key=lambda r: r.ts_ns)
    alerts = final(a for a in run(iter(mine)) if isinstance(a, Alert))
    sender = told["sender"]
    [k13] = pick(alerts, "K13", "zero-window", dport=sender["dport"], dst="127.0.0.1")
    assert k13.metric >= 1.0 and "advertised a zero window" in k13.message


class RefusingSession(KernelSession):
    """A kernel whose verifier refuses the iterator (the first load fails naming it)."""

    refusals = 0

    def load(self) -> None:
        if "siftr_poll" in self.loaded_names():
            RefusingSession.refusals += 1
            self.refused = ["siftr_poll"]  # as load() reads it from libbpf's log
            raise BpfError("failed to load nettrail.bpf.o (program siftr_poll): Operation not permitted")
        super().load()


def test_a_kernel_that_refuses_the_iterator_traces_the_rest_and_says_so() -> None:
    opts = Options(providers=("tcp", "siftr-poll"), exclude_pid=os.getpid())
    with RefusingSession(opts) as session:
        assert RefusingSession.refusals == 1 and "siftr_poll" not in session.links
        assert {"inet_sock_set_state", "tcp_retransmit_skb"} <= set(session.links)  # the rest traces
        assert session.failed["siftr_poll"].startswith("this kernel refused the siftr-poll iterator")
        assert [(p, what) for p, what, _ in session.degraded if p == "siftr-poll"] == [("siftr-poll", "siftr_sample")]
        assert session.run_iter("siftr_poll") is False  # the poller's runs do nothing

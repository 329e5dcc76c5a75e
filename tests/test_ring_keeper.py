"""Kernel tests of the ring keeper (collector/bpf/keeper.py): a collector SIGKILLed with
events still in its kernel ring has them counted by the next collector on its spool,
exactly (the child reads none: unread = generated - lost, the kernel's own counters);
one that drained its ring and ended leaves nothing to count."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from ingest_stub import TOKEN, IngestStub

from collector.sinks.http import HttpSink
from tests.kernel_support import kernel

pytestmark = kernel
ROOT = Path(__file__).resolve().parent.parent

# A session tracing tcp on one port, its ring never read; CONNECTIONS connections made;
# then it says how many events the kernel put in the ring, and (drain) reads them all and
# closes its keeper as collect() does, or waits to be killed.
CHILD = textwrap.dedent(
    """
    import socket, sys, time
    sys.path[:0] = [{root!r}, {tests!r}]
    from collector.bpf import layout
    from collector.bpf.keeper import RingKeeper
    from collector.bpf.loader import Filters, KernelSession, Options
    from tests.kernel_support import RING_EVENTS
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    port = lst.getsockname()[1]
    opts = Options(providers=("tcp",), filters=Filters(port=port), ringbuf_bytes=1 << 20)
    session = KernelSession(opts)
    session.__enter__()
    keeper = RingKeeper.start(session.ring_fd(), opts.ringbuf_bytes, layout.EVENT_SIZE, {spool!r})
    lst.listen(64)
    for _ in range({connections}):
        c = socket.create_connection(("127.0.0.1", port))
        s, _ = lst.accept()
        c.close()
        s.close()
    def ring_events():
        counters = session.counters().sum(axis=0)
        return int(counters[0, :RING_EVENTS].sum()) - int(counters[1, :RING_EVENTS].sum())
    seen, stable = -1, 0
    while stable < 10:  # the connections' last state changes (TIME_WAIT timers aside) are in
        now = ring_events()
        stable, seen = (stable + 1, seen) if now == seen else (0, now)
        time.sleep(0.05)
    if {drain}:
        session.detach()
        while session.reader.read().size:
            pass
        keeper.close()
        session.close()
        print("drained", flush=True)
    else:
        print("unread", seen, flush=True)
        time.sleep(120)
    """
)


def run_child(spool: Path, drain: bool) -> tuple[subprocess.Popen[str], str]:
    spool.mkdir(parents=True, exist_ok=True)
    code = CHILD.format(root=str(ROOT), tests=str(ROOT / "tests"), spool=str(spool), connections=20, drain=drain)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert child.stdout is not None
    return child, child.stdout.readline().strip()


def test_events_a_killed_collector_left_in_its_ring_are_counted_by_the_next(stub: IngestStub, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    child, said = run_child(spool, drain=False)
    try:
        word, unread = said.split()
        assert word == "unread" and int(unread) > 0
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
    sink = HttpSink(stub.url, TOKEN, spool, batch_size=10, flush_interval=0.01)  # waits for the keeper's count
    killed = sink.take_killed()
    sink.close()
    assert killed == int(unread)  # every event the kernel put in the ring, none read: counted once
    assert sorted(p.name for p in spool.glob("ring-*")) == []


def test_a_collector_that_drained_its_ring_leaves_nothing_to_count(stub: IngestStub, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    child, said = run_child(spool, drain=True)
    assert said == "drained"
    assert child.wait(timeout=30) == 0
    deadline = time.monotonic() + 10
    while list(spool.glob("ring-*")) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert list(spool.glob("ring-*")) == []  # the keeper was told, and went without a count
    sink = HttpSink(stub.url, TOKEN, spool, batch_size=10, flush_interval=0.01)
    assert sink.take_killed() == 0
    sink.close()

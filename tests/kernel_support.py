"""Helpers for the kernel collector tests: skip reasons, a tracing session, loopback traffic,
skb lifetimes.

Every kernel test filters on ports it owns so concurrent traffic on this shared
machine cannot change its exact counts. Keep in sync with collector/bpf/loader.py.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

from collector.bpf import loader
from collector.bpf.kallsyms import kernel_symbols
from collector.bpf.loader import Filters, KernelSession, Options
from collector.bpf.source import KernelSource, wall_offset
from translators import kernel as kernel_translators
from translators.kernel import KernelEnv
from translators.records import Record, SkbEvent

kernel_translators.VALIDATE = True  # every record the kernel tests see passes Record.__post_init__


def bpf_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (CAP_BPF, CAP_PERFMON) to load eBPF programs"
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        return "needs kernel BTF (/sys/kernel/btf/vmlinux)"
    if loader.missing_privileges():
        return str(loader.missing_privileges())
    return None


needs_bpf = pytest.mark.skipif(bpf_skip_reason() is not None, reason=str(bpf_skip_reason()))
kernel = [pytest.mark.kernel, needs_bpf]


@dataclass
class Capture:
    session: KernelSession
    source: KernelSource
    records: list[Record] = field(default_factory=list)

    def drain(self) -> list[Record]:
        self.records.extend(self.source.poll(timeout=0.05))
        return self.records

    def wait_for(self, done: Callable[[list[Record]], bool], timeout: float = 5.0) -> list[Record]:
        """Poll until done(records) holds; bounded by timeout (then the test's asserts speak)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if done(self.drain()):
                break
        return self.records

    def lost(self, provider: str, what: str) -> bool:
        """Whether the loader named (provider, what) as something this kernel cannot give
        (collector/bpf/variants.py): the kernel matrix's tests then assert its absence."""
        return any((p, w) == (provider, what) for p, w, _ in self.session.degraded)

    def of(self, kind: str, cookie: int | None = None) -> list[Record]:
        return [r for r in self.records if r.kind == kind and (cookie is None or r.sock_cookie == cookie)]


@contextmanager
def tracing(
    providers: tuple[str, ...] = ("tcp",),
    ppl: int = 1,
    ringbuf: int = 1 << 22,
    drop_rate: int = 0,
    counts_every: float = 3600.0,
    skb_sample: int = 1,
    skb_stages: str | None = None,
    **filters: object,
) -> Iterator[Capture]:
    """A loaded session; counts_every: seconds between FlowCounters/DropCount map reads."""
    filt = Filters(**filters)  # type: ignore[arg-type]
    opts = Options(
        providers=providers,
        ppl=ppl,
        filters=filt,
        ringbuf_bytes=ringbuf,
        drop_rate=drop_rate,
        skb_sample=skb_sample,
        skb_stages=skb_stages,
    )
    env = KernelEnv(
        host_id="test-host", boot_id="test-boot", wall_offset=wall_offset(), symbolize=kernel_symbols().symbolize
    )
    with KernelSession(opts) as session:
        env.drop_reasons = session.drop_reasons
        env.rst_reasons = session.rst_reasons
        yield Capture(session, KernelSource(session, env, flow_interval=counts_every))


def bound_listener(host: str = "127.0.0.1") -> socket.socket:
    """A socket bound to a fresh port but not yet listening (so tracing can see LISTEN)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, 0))
    return s


def cookie_of(s: socket.socket) -> int:
    return int.from_bytes(s.getsockopt(socket.SOL_SOCKET, 57, 8), "little")  # SO_COOKIE


def free_port() -> int:
    """A port nothing listens on (bound then closed: connecting to it is refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def snmp_tcp(name: str, netns: str | None = None) -> int:
    """A counter of the Tcp: line of /proc/net/snmp (e.g. RetransSegs), of the named
    network namespace if given."""
    if netns is None:
        text = open("/proc/net/snmp").read()
    else:
        cmd = ["ip", "netns", "exec", netns, "cat", "/proc/net/snmp"]
        text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    names, values = (ln.split() for ln in text.splitlines() if ln.startswith("Tcp:"))
    return int(values[names.index(name)])


def bpftool_prog_ids() -> set[int]:
    import json

    out = subprocess.run(["bpftool", "-j", "prog", "list"], capture_output=True, text=True, check=True).stdout
    return {int(p["id"]) for p in json.loads(out or "[]")}


def attached_tracepoints(session: KernelSession) -> set[str]:
    """The tracepoints the kernel has this session's programs attached to, as bpftool's
    link list shows them (not the loader's own bookkeeping)."""
    import json

    ids = set(session.program_ids().values())
    out = subprocess.run(["bpftool", "-j", "link", "list"], capture_output=True, text=True, check=True).stdout
    return {str(link["tp_name"]) for link in json.loads(out or "[]") if link.get("prog_id") in ids}


def my_comm() -> str:
    return open(f"/proc/self/task/{os.getpid()}/comm").read().strip()


def programs_left(ids: set[int], timeout: float = 5.0) -> set[int]:
    """Which of ids bpftool still lists; the kernel frees released programs after an RCU grace period."""
    end = time.monotonic() + timeout
    left = ids & bpftool_prog_ids()
    while left and time.monotonic() < end:
        time.sleep(0.05)
        left = ids & bpftool_prog_ids()
    return left


@contextmanager
def pinned(cpu: int) -> Iterator[None]:
    """Run the calling thread on one CPU (affinity is per thread), then restore it: a buffer
    read on the CPU that allocated it is freed there at once (skb lifecycle tests)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def one_cpu() -> contextlib.AbstractContextManager[None]:
    """Sender and receiver on one CPU (the lowest this thread may use), so that the kernel
    sees their work in the order the test did it."""
    return pinned(min(os.sched_getaffinity(0)))


def lifetimes(records: Iterable[Record]) -> dict[int | None, list[SkbEvent]]:
    """The skb events among records, one list per buffer lifetime in arrival order, keyed by
    skb_uid (a new one per lifetime, even at a reused address: the generations test of
    tests/test_collect_skb_lifecycle.py), the lifetimes in the order they started."""
    out: dict[int | None, list[SkbEvent]] = defaultdict(list)
    for r in records:
        if isinstance(r, SkbEvent):
            out[r.skb_uid].append(r)
    return out


def short_connections(count: int, size: int) -> int:
    """`count` connections to a local listener, `size` bytes each, closed at once; returns its port."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(count)
        port = int(listener.getsockname()[1])
        for _ in range(count):
            with socket.create_connection(("127.0.0.1", port)) as client:
                client.sendall(b"x" * size)
                server, _ = listener.accept()
                with server:
                    got = 0
                    while got < size:
                        chunk = server.recv(65536)
                        assert chunk
                        got += len(chunk)
    return port

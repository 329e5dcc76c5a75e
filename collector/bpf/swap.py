"""Following the dashboard's tracing request: `nettrail collect --providers-from-server`.

The ingest answer names what the dashboard asks this host to trace
(translators/tracing_request.py; the HTTP sink keeps the newest). When it differs from
what runs, the new programs are opened and loaded (verified) while the old ones still
run, then the old ones are detached and the new ones attached at once (the old ring is
drained after; the new one holds what comes meanwhile): the gap, from the first detach
to the last attach, is measured and sent on the new collector_status (untraced_ns). Its
floor is one RCU grace period: a tracepoint whose last probe went and whose first comes
back waits for one at that attach (tracepoint.c, the 1->0->1 transition), which the
first attach pays for all of them (bench/bench_swap.py). A
request whose programs will not load is said once and not tried again until it changes;
the old programs keep running. The new session takes over the running one's attribution
maps (loader.ATTRIBUTION_MAPS: sockets keep their owners); its other maps are fresh, so its
counters start from zero, as after a collector restart.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any, Protocol

from collector.bpf.build import BuildError
from collector.bpf.loader import BpfError, KernelSession, Options
from translators.skb_window import ALWAYS, parse_window
from translators.tracing_request import TracingRequest, from_answer

COMMAND_LINE, DASHBOARD = "command line", "dashboard"


class Answers(Protocol):
    tracing: tuple[bool, Any]  # collector/sinks/http.py: (answered, the answer's "tracing" member)


def options_for(own: Options, request: TracingRequest | None) -> tuple[Options, str]:
    """The options a request asks for, from the collector's own (the command line's)."""
    if request is None:
        return own, COMMAND_LINE
    window = own.skb_window  # the collector's own windows, unless the request names them
    if request.skb_window is not None:
        window = None if request.skb_window == ALWAYS else parse_window(request.skb_window)
    if request.skb_sample is None:  # the collector's own sampling, and its stages
        return dataclasses.replace(own, providers=request.providers, skb_window=window), DASHBOARD
    # the stages follow the new N (ends when sampled, all with every buffer)
    return dataclasses.replace(
        own, providers=request.providers, skb_sample=request.skb_sample, skb_stages=None, skb_window=window
    ), DASHBOARD


def prepare(opts: Options, running: KernelSession | None = None) -> KernelSession:
    """A session loaded, not attached (nothing of it runs yet), with the running one's
    attribution maps and its ring mapped (outside the switch's gap)."""
    session = KernelSession(opts, carry_from=running)
    session.prepare()
    try:
        session.open_reader()
    except BaseException:
        session.close()
        raise
    return session


@dataclasses.dataclass
class Swap:
    """Watches the answers for a request that differs from what runs; prepares its session."""

    answers: Answers | None  # None: the command line's set, always
    own: Options
    prog: str = "nettrail collect"
    next: KernelSession | None = None
    origin: str = COMMAND_LINE  # who chose the prepared session's providers
    started_ns: int = 0  # CLOCK_MONOTONIC when the last switch began detaching
    untraced_ns: int = 0  # how long the last switch left tracepoints untraced
    failed: str = ""  # why the last switch could not attach the prepared programs
    _seen: Any = None  # the last answer value looked at
    _refused: Options | None = None  # its programs would not load: not tried again until it changes

    def due(self, running: Options, session: KernelSession | None = None) -> bool:
        """True once a session for a changed request is loaded (in `next`); `session`, the
        running one, lends it its attribution maps."""
        if self.answers is None:
            return False
        answered, value = self.answers.tracing
        if not answered or value == self._seen:
            return False
        self._seen = value
        try:
            wanted, origin = options_for(self.own, from_answer(value))
        except ValueError as exc:
            self._say(f"ignoring the server's tracing request: {exc}")
            return False
        if wanted == running or wanted == self._refused:
            return False
        try:
            self.next = prepare(wanted, session)
        except (BpfError, BuildError) as exc:
            self._refused = wanted
            self._say(f"cannot trace {','.join(wanted.providers)} as the {origin} asks: {exc}; "
                      f"still tracing {','.join(running.providers)}")  # fmt: skip
            return False
        self.origin = origin
        return True

    def switch(self, running: KernelSession) -> None:
        """Detach the running programs and attach the prepared ones at once (the old ring
        is drained after: the new ring holds what comes meanwhile). untraced_ns: from the
        first detach to the last attach, the longest any tracepoint went untraced."""
        assert self.next is not None
        self.started_ns = time.monotonic_ns()
        running.detach(settle=False)  # its last runs end while the new programs attach
        try:
            self.next.attach()
        except BpfError as exc:  # loaded but would not attach: trace() goes back to the command line's set
            self.failed = str(exc)
        self.untraced_ns = time.monotonic_ns() - self.started_ns
        running.settle()  # before the old ring's final drain

    def take(self) -> KernelSession | None:
        session, self.next = self.next, None
        return session

    def _say(self, message: str) -> None:
        print(f"{self.prog}: {message}", file=sys.stderr, flush=True)

"""Record-stream builders for the anomaly engine tests (tests/test_alerts_*.py).

A ``Stream`` hands out records of one host with increasing seq numbers and a clock the
test moves explicitly, so every scenario states its own timing. Flows are 4-tuples
with a socket cookie; the records are the real translators.records types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from analysis.alerts.config import config_from_mapping
from analysis.alerts.engine import RuleEngine
from translators.records import (
    Alert,
    Connection,
    DropCount,
    FlowCounters,
    LossReport,
    Record,
    SiftrSample,
    SkbDrop,
    SockEvent,
    TcpCongState,
    TcpReset,
    TcpRetransmit,
    TcpSegment,
    TcpStateChange,
    UdpDatagram,
    connection_uuid,
)

HOST, BOOT = "h1", "b1"
T0 = 1_700_000_000.0


@dataclass(frozen=True)
class Flow:
    src: str
    sport: int
    dst: str
    dport: int
    cookie: int
    pid: int | None = 4242
    comm: str | None = "client"

    @property
    def uuid(self) -> str:
        return connection_uuid(HOST, BOOT, self.cookie)


class Stream:
    def __init__(self, t: float = T0) -> None:
        self.t = t
        self.seq = 0
        self.cookie = 1000

    def flow(self, src: str = "10.0.0.1", sport: int | None = None, dst: str = "10.0.0.2", dport: int = 80,
             pid: int | None = 4242, comm: str | None = "client") -> Flow:  # fmt: skip
        self.cookie += 1
        return Flow(
            src, sport if sport is not None else 30000 + self.cookie % 30000, dst, dport, self.cookie, pid, comm
        )

    def advance(self, dt: float) -> None:
        self.t += dt

    def _env(self, provider: str, probe: str, **kw: Any) -> dict[str, Any]:
        self.seq += 1
        base = dict(host_id=HOST, boot_id=BOOT, seq=self.seq, ts_ns=int((self.t - T0) * 1e9) + 1,
                    ts_wall=self.t, provider=provider, probe=probe)  # fmt: skip
        base.update(kw)
        return base

    def _flowkw(self, f: Flow, owner: bool = True) -> dict[str, Any]:
        kw: dict[str, Any] = dict(conn_uuid=f.uuid, sock_cookie=f.cookie, ip_ver=4, src=f.src, sport=f.sport,
                                  dst=f.dst, dport=f.dport)  # fmt: skip
        if owner and f.pid is not None:
            kw.update(pid=f.pid, tgid=f.pid, comm=f.comm, ctx="task")
        return kw

    def state(self, f: Flow, prev: str, new: str) -> TcpStateChange:
        return TcpStateChange(**self._env("tcp", "state-change", **self._flowkw(f)), prev_state=prev, state=new)

    def retrans(self, f: Flow, **kw: Any) -> TcpRetransmit:
        return TcpRetransmit(**self._env("tcp", "retransmit", **self._flowkw(f, owner=False)), **kw)

    def cong(self, f: Flow, ca: str, prev: str | None = None, **kw: Any) -> TcpCongState:
        return TcpCongState(**self._env("tcp", "cong-state", **self._flowkw(f, owner=False)), ca_state=ca,
                            prev_ca_state=prev, **kw)  # fmt: skip

    def reset(self, f: Flow, sender: str, state: str | None, **kw: Any) -> TcpReset:
        fk = self._flowkw(f, owner=False)
        fk.update(kw.pop("flow_overrides", {}))
        return TcpReset(**self._env("tcp", f"reset-{'sent' if sender == 'local' else 'received'}", **fk),
                        sender=sender, state=state, **kw)  # fmt: skip

    def siftr(self, f: Flow, direction: str = "in", **kw: Any) -> SiftrSample:
        kw.setdefault("mss", 1000)
        return SiftrSample(**self._env("siftr", "siftr", **self._flowkw(f, owner=False)), direction=direction, **kw)

    def counters(self, f: Flow, proto: str = "tcp", **kw: Any) -> FlowCounters:
        return FlowCounters(**self._env("tcp", "flow-counters", **self._flowkw(f, owner=False)), proto=proto, **kw)

    def drop(self, reason: str, src: str, sport: int | None, dst: str, dport: int | None, l4: str = "tcp",
             **kw: Any) -> SkbDrop:  # fmt: skip
        return SkbDrop(**self._env("skb", "m-free", ip_ver=4, src=src, sport=sport, dst=dst, dport=dport,
                                   l4_proto=l4, **kw), drop_reason=0, drop_reason_str=reason)  # fmt: skip

    def drop_count(self, reason: str, count: int, delta: int) -> DropCount:
        return DropCount(**self._env("skb", "drop-count"), drop_reason_str=reason, count=count, delta=delta)

    def sock(self, probe: str, proto: str, src: str, sport: int, **kw: Any) -> SockEvent:
        return SockEvent(**self._env("linux", probe, ip_ver=4, src=src, sport=sport), proto=proto, **kw)

    def udp(self, src: str, sport: int, dst: str, dport: int, probe: str = "receive") -> UdpDatagram:
        return UdpDatagram(**self._env("udp", probe, ip_ver=4, src=src, sport=sport, dst=dst, dport=dport))

    def segment(self, src: str, sport: int, dst: str, dport: int, flags: int, **kw: Any) -> TcpSegment:
        return TcpSegment(**self._env("tcp", "receive", ip_ver=4, src=src, sport=sport, dst=dst, dport=dport),
                          tcp_flags=flags, **kw)  # fmt: skip

    def connection(self, src: str, sport: int, dst: str, dport: int, conn_state: str, **kw: Any) -> Connection:
        return Connection(**self._env("tcp", "connection"), proto="tcp", src=src, sport=sport, dst=dst, dport=dport,
                          source="wire", conn_state=conn_state, **kw)  # fmt: skip

    def loss(self, event_type: str, lost: int, lost_total: int, received_total: int | None = None) -> LossReport:
        return LossReport(**self._env("nettrail", "loss"), event_type=event_type, lost=lost, lost_total=lost_total,
                          received_total=received_total)  # fmt: skip

    def skipped(self, program: str, skipped: int, skipped_total: int) -> LossReport:
        """Runs of a program the kernel skipped (recursion), as KernelSource reports them."""
        return LossReport(**self._env("nettrail", "skipped", hook=f"prog/{program}"), event_type=f"{program} runs",
                          lost=skipped, lost_total=skipped_total)  # fmt: skip


def engine(**overrides: Any) -> RuleEngine:
    """An engine with default thresholds plus the given section overrides, deterministic seqs."""
    return RuleEngine(config_from_mapping(overrides), seq_base=1 << 62)


def feed_all(eng: RuleEngine, records: list[Record], tick_every: float | None = 1.0) -> list[Alert]:
    """Feed records in order, sweeping whenever record time crosses a tick boundary."""
    out: list[Alert] = []
    next_tick = None
    for rec in records:
        out += eng.feed(rec)
        if tick_every is not None:
            if next_tick is None:
                next_tick = rec.ts_wall + tick_every
            elif rec.ts_wall >= next_tick:
                out += eng.tick(rec.ts_wall)
                next_tick = rec.ts_wall + tick_every
    return out


def only(alerts: list[Alert], rule_id: str, condition: str | None = None) -> list[Alert]:
    return [a for a in alerts if a.rule_id == rule_id and (condition is None or a.condition == condition)]

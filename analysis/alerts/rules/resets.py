"""K3 reset storms, with who sent them (anomalies.md 4, K3).

Two conditions. *volume*: one process (or, for RSTs the kernel sends on behalf of no
socket, one local port) sends more than ``volume_max`` RSTs in ``volume_window_s``.
*peer-share*: the peers behind one destination service reset more than
``peer_share`` of the new connections made to it in ``peer_window_s`` (at least
``peer_min_connections`` of them, so a single refused connect is not 100 %).
Every RST is classified in the message: local active reset, local reply to a closed
port, local reply to an unacceptable segment, peer refusal, or peer abort.

*idle-reset* (notice, per connection): a RST received in ESTABLISHED after the
connection carried no data for ``idle_reset_s`` is classified as a likely middlebox
idle timeout. Data is a siftr / tcpdebug sample with payload, or a siftr-poll sample
whose snd_nxt or snd_una moved since the last poll (or with bytes to read); the connection's
establishment counts as its first activity. The silence counts when it lasted until
the RST, or when it was broken only by local data that the peer never answered (the
middlebox that forgot the connection answers the first segment after the silence
with the RST). A connection whose establishment and data were never seen is not
judged.

Why each received RST came (reset_causes.py): the TCP stack of a peer on this host with its
kernel reason, a firewall or middlebox when that stack sent none, or a remote peer; the
peer-share finding ends with a *Why:* sentence of those causes and their counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from translators.records import Record, SiftrSample, TcpDebugSnapshot, TcpReset, TcpStateChange

from ..state import Window
from .base import Context, Rule, endpoint, flow_key, who
from .reset_causes import ResetCauses, ResetSources, stack_cause

LOCAL_KINDS = ("active", "closed-port", "unacceptable")
_LOCAL_WORDS = {
    "active": "active resets (the application aborted or closed with unread data)",
    "closed-port": "replies to segments for a closed port (no listener)",
    "unacceptable": "replies to unacceptable segments on open sockets",
}


def local_kind(rec: TcpReset) -> str:
    if rec.active:
        return "active"
    if rec.state in (None, "CLOSED", "LISTEN") and rec.conn_uuid is None:
        return "closed-port"
    return "unacceptable"


@dataclass(slots=True)
class _Volume:
    total: Window
    by_kind: dict[str, Window] = field(default_factory=dict)
    reasons: dict[str, Window] = field(default_factory=dict)
    evidence: list[int] = field(default_factory=list)
    last_peer: str = ""


@dataclass(slots=True)
class _Activity:
    """When a connection last carried data, and the last long silence it came out of."""

    last: float
    last_seq: int
    gap: float = 0.0  # the silence (>= idle_reset_s) the latest data ended
    gap_seq: int = 0  # the last record before that silence
    answered: bool = True  # the peer sent data since that silence ended
    polled: tuple[int | None, int | None] = (None, None)  # siftr-poll: snd_una, snd_nxt at the last poll


@dataclass(slots=True)
class _Dest:
    attempts: Window
    refused: Window
    aborted: Window
    causes: ResetCauses
    evidence: list[int] = field(default_factory=list)
    idle: Window | None = None  # the aborts classified as middlebox idle timeouts


class ResetStorm(Rule):
    rule_id = "K3"
    kinds = ("tcp_reset", "tcp_state", "siftr_sample", "tcpdebug_snapshot")

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.volume_window = self.num("volume_window_s")
        self.peer_window = self.num("peer_window_s")
        self.idle_s = self.num("idle_reset_s")
        self.volumes = self.keys_map()
        self.dests = self.keys_map()
        self.activity = self.flows_map()
        self.sources = ResetSources(ctx.max_flows)

    def _dest(self, rec: Record, dst: str | None, dport: int | None) -> _Dest:
        w = self.peer_window
        return self.dests.get_or_create(  # type: ignore[no-any-return]
            (rec.host_id, dst, dport), lambda: _Dest(Window(w), Window(w), Window(w), ResetCauses(w))
        )

    def feed(self, rec: Record) -> None:
        if isinstance(rec, SiftrSample):
            if rec.direction == "poll":
                self._poll(rec)
            elif rec.data_sz:
                self._data(rec, rec.direction == "in")
            return
        if isinstance(rec, TcpDebugSnapshot):
            if rec.tcp_payload_len and rec.direction in ("input", "output"):
                self._data(rec, rec.direction == "input")
            return
        if isinstance(rec, TcpStateChange):
            if rec.state in ("ESTABLISHED", "LISTEN"):
                self.sources.note_local(rec)
            if rec.state == "ESTABLISHED" and self.idle_s > 0:
                self.activity.put(flow_key(rec), _Activity(rec.ts_wall, rec.seq))
            elif rec.prev_state == "ESTABLISHED":
                self.activity.pop(flow_key(rec))
            if rec.prev_state == "CLOSED" and rec.state == "SYN_SENT":
                d = self._dest(rec, rec.dst, rec.dport)
                d.attempts.add(rec.ts_wall)
                if d.evidence:  # resets already seen: the share may now be judged
                    self._check_dest(rec, d, bump=False)
        elif isinstance(rec, TcpReset):
            if rec.sender == "local":
                self._sent(rec)
                self._local(rec)
            else:
                idle = rec.state == "ESTABLISHED" and self._idle_reset(rec)
                self._peer(rec, idle)

    def _data(self, rec: SiftrSample | TcpDebugSnapshot, received: bool) -> None:
        a = self.activity.peek(flow_key(rec))
        if a is None:
            return  # establishment not seen (or idle classification off): not judged
        t = rec.ts_wall
        if t - a.last >= self.idle_s:
            a.gap, a.gap_seq, a.answered = t - a.last, a.last_seq, received
        elif received:
            a.answered = True
        a.last, a.last_seq = max(a.last, t), rec.seq

    def _poll(self, rec: SiftrSample) -> None:
        """A siftr-poll sample has no segment: data moved since the last poll if snd_nxt
        advanced (sent) or snd_una did or bytes wait to be read (the peer's answer)."""
        a = self.activity.peek(flow_key(rec))
        if a is None:
            return
        una, nxt = a.polled
        a.polled = (rec.snd_una, rec.snd_nxt)
        received = (una is not None and rec.snd_una != una) or bool(rec.rcv_buf_cc)
        if received or (nxt is not None and rec.snd_nxt != nxt):
            self._data(rec, received)

    def _idle_reset(self, rec: TcpReset) -> bool:
        """Classify (and notice) a peer reset after a long silence; True when it was one."""
        a = self.activity.peek(flow_key(rec))
        if a is None:
            return False
        t = rec.ts_wall
        if t - a.last >= self.idle_s:
            silence, before = t - a.last, a.last_seq
            after = "and nothing was sent since"
        elif a.gap and not a.answered:
            silence, before = a.gap, a.gap_seq
            after = "and it answered the first data sent after that silence"
        else:
            return False
        subject = self.ctx.owner(rec)
        message = (
            f"The peer {endpoint(rec.dst, rec.dport)} reset the established connection of {who(subject)} after "
            f"{silence:.1f} s without any data ({after}): likely a middlebox (NAT, firewall, load balancer) that "
            f"timed the idle connection out and forgot it. Keep-alives more frequent than its idle timeout avoid this."
        )
        self.fire(
            "idle-reset", flow_key(rec), now=t, severity="notice", subject=subject, message=message,
            clear_after=2 * self.volume_window, metric=silence, evidence=[before, rec.seq],
        )  # fmt: skip
        return True

    def _sent(self, rec: TcpReset) -> None:
        """A RST of this host's stack: it explains a received one it answers that came first."""
        self.sources.note_local(rec)
        got = self.sources.sent_rst(rec)
        if got is None:
            return
        d = self.dests.peek(got.dest)
        if d is None:
            return
        phase = got.cause.split("|", 1)[0]
        d.causes.add(got.rec.ts_wall, got.cause, -1.0)
        d.causes.add(got.rec.ts_wall, stack_cause(phase, rec))
        self._check_dest(got.rec, d, bump=False)

    def _local(self, rec: TcpReset) -> None:
        subject = self.ctx.owner(rec)
        if subject.pid is not None:
            key: tuple[object, ...] = ("process", subject.tgid or subject.pid, subject.comm)
        else:
            key = ("port", rec.src, rec.sport)
        w = self.volume_window
        vol = self.volumes.get_or_create((rec.host_id, *key), lambda: _Volume(Window(w)))
        kind = local_kind(rec)
        vol.total.add(rec.ts_wall)
        vol.by_kind.setdefault(kind, Window(w)).add(rec.ts_wall)
        if rec.reason and (rec.reason in vol.reasons or len(vol.reasons) < 16):
            vol.reasons.setdefault(rec.reason, Window(w)).add(rec.ts_wall)
        if len(vol.evidence) < 32:
            vol.evidence.append(rec.seq)
        n = vol.total.total(rec.ts_wall)
        if n <= self.num("volume_max"):
            return
        split = ", ".join(
            f"{int(vol.by_kind[k].total(rec.ts_wall))} {_LOCAL_WORDS[k]}" for k in LOCAL_KINDS if k in vol.by_kind
        )
        reasons = ", ".join(
            f"{r} {int(win.total(rec.ts_wall))}" for r, win in sorted(vol.reasons.items()) if win.total(rec.ts_wall)
        )
        sender = who(subject) if key[0] == "process" else f"the kernel on local {endpoint(rec.src, rec.sport)}"
        message = (
            f"This host sent {int(n)} RSTs in {w:g} s from {sender} (latest to {endpoint(rec.dst, rec.dport)}): "
            f"{split}" + (f" (the kernel's reasons: {reasons})" if reasons else "") + ". More than "
            f"{self.num('volume_max'):g} a minute is beyond ordinary connection churn."
        )
        if key[0] == "port":
            subject.dst = subject.dport = None
        subject.conn_uuid = subject.sock_cookie = None
        self.fire(
            "volume", key, now=rec.ts_wall, severity="warning", subject=subject, message=message,
            clear_after=2 * w, metric=n, evidence=vol.evidence,
        )  # fmt: skip

    def _peer(self, rec: TcpReset, idle: bool) -> None:
        d = self._dest(rec, rec.dst, rec.dport)
        refused = rec.state == "SYN_SENT"
        (d.refused if refused else d.aborted).add(rec.ts_wall)
        cause = self.sources.received_rst(rec, (rec.host_id, rec.dst, rec.dport), "refused" if refused else "aborted")
        d.causes.add(rec.ts_wall, cause)
        if idle:
            if d.idle is None:
                d.idle = Window(self.peer_window)
            d.idle.add(rec.ts_wall)
        if len(d.evidence) < 32:
            d.evidence.append(rec.seq)
        self._check_dest(rec, d, bump=True)

    def _check_dest(self, rec: TcpReset | TcpStateChange, d: _Dest, bump: bool) -> None:
        t = rec.ts_wall
        attempts = d.attempts.total(t)
        refused, aborted = d.refused.total(t), d.aborted.total(t)
        resets = refused + aborted
        if attempts < self.num("peer_min_connections"):
            return
        share = resets / attempts
        if share <= self.num("peer_share"):
            return
        subject = self.ctx.owner(rec)
        subject.conn_uuid = subject.sock_cookie = None
        subject.src = subject.sport = None
        idle = int(d.idle.total(t)) if d.idle is not None else 0
        after_idle = f" ({idle} after a long silence: likely a middlebox idle timeout)" if idle else ""
        message = (
            f"The peer {endpoint(rec.dst, rec.dport)} (or a middlebox on the way) reset {int(resets)} of "
            f"{int(attempts)} new connections ({share:.0%}) in {self.peer_window:g} s: {int(refused)} refused "
            f"during the handshake, {int(aborted)} aborted later{after_idle}. Clients of this service are failing."
            + d.causes.sentence(t, rec.dst)
        )
        self.fire(
            "peer-share", ("dest", rec.dst, rec.dport), now=t, severity="warning", subject=subject,
            message=message, clear_after=2 * self.peer_window, metric=share, evidence=d.evidence, bump=bump,
        )  # fmt: skip

"""tcp --tcp-fold: raw NT_EV_LIFECYCLE events -> TcpLifecycle, and a TcpLifecycle -> the records
the socket streams without the fold (expand).

A folded socket's state changes and congestion-state changes never reach the ring one by
one: the kernel keeps them in the socket's storage (kmod/fold.bpf.h) and sends them with
its final counters as one event. expand() gives back what the streamed path records for
that socket, so consumers of tcp_state, tcp_cong_state, connection and flow_counters
(the alert rules, the connection page) read a folded socket as a streamed one. What the
fold does not keep, an expanded record derives (docs/records/tcp.md, tcp_lifecycle):

- times: each change's to the microsecond (born_ns + state_us), wall time from the
  lifecycle's own clock offset;
- owner: every expanded record carries the lifecycle's owner (the socket's at its end),
  where a streamed one carries the owner at its change; `cpu` is the lifecycle's for the
  connection and flow records, unknown (null) for the changes;
- congestion: the last change only (congestion_changes counts them all); a short connection
  makes one.

Keep in sync with: kmod/nettrail.h (struct nt_fold, nt_lifecycle_body), kmod/fold.bpf.h,
translators/tcp.py (state_records, the rules of a change), translators/siftr.py
(translate_flow).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from translators.kernel import CTX, KernelEnv, KernelRecord, Raw, as_struct, ca_state_name, envelope, make, state_name
from translators.records import Connection, FlowCounters, Record, TcpCongState, TcpLifecycle
from translators.tcp import cwnd_bytes, into_time_wait, ssthresh_bytes, state_records

FOLD_STATE, FOLD_TASK, FOLD_ERR, FOLD_FIN = 0x0F, 0x10, 0x20, 0x40  # NT_FOLD_* (collector/bpf/layout.py)
FOLD_RST_PEER = 0x80  # NT_FOLD_RST_PEER, in reset_how
HOOK = "tp_btf/tcp_destroy_sock"
FLUSH_HOOK = "iter/tcp"  # siftr-poll's iterator flushed it (partial)


def translate_lifecycle(raw: Raw, env: KernelEnv) -> list[KernelRecord]:
    n = min(raw["nstates"], len(raw["states"]))
    codes = _ints(raw["states"][:n])
    linux = [code & FOLD_STATE for code in codes]
    partial = bool(raw["partial"])
    first = raw["first_ns"]
    first_old = raw["first_old"] if n else None
    cong = raw["cong_changes"]
    mss = raw["mss"]
    has_flow = bool(raw["has_flow"])
    return [
        make(
            TcpLifecycle,
            dict(
                **envelope(raw, env, "tcp", "lifecycle", FLUSH_HOOK if partial else HOOK),
                partial=partial,
                state=state_name(raw["state"]),
                state_path=" ".join(str(state_name(s)) for s in linux),
                prev_state=state_name(first_old) if first_old is not None else None,
                linux_prev_state=first_old,
                linux_states=linux,
                state_us=_ints(raw["state_us"][:n]),
                state_ctx=["task" if code & FOLD_TASK else "softirq" for code in codes],
                state_error=[bool(code & FOLD_ERR) for code in codes],
                state_peer_closed=[bool(code & FOLD_FIN) for code in codes],
                time_wait=_into_time_wait(first_old or 0, linux, codes) if n else None,
                **_resets_and_retransmits(raw),
                born_ns=raw["born_ns"] or None,
                congestion_changes=cong,
                first_ca_state=ca_state_name(raw["first_ca"]) if cong else None,
                prev_ca_state=ca_state_name(raw["last_old_ca"]) if cong else None,
                ca_state=ca_state_name(raw["last_ca"]) if cong else None,
                congestion_us=raw["cong_us"] if cong else None,
                congestion_ctx=CTX.get(raw["cong_ctx"], "unknown") if cong else None,
                congestion_after=raw["cong_at"] if cong else None,
                snd_cwnd=cwnd_bytes(raw["snd_cwnd"], mss) if cong else None,
                snd_ssthresh=ssthresh_bytes(raw["snd_ssthresh"], mss) if cong else None,
                start=env.wall(first) if first else None,
                lifetime_ns=raw["ts_ns"] - first if first else None,
                bytes_acked=raw["bytes_acked"],
                bytes_received=raw["bytes_received"],
                segs_in=raw["segs_in"],
                segs_out=raw["segs_out"],
                total_retrans=raw["total_retrans"],
                bytes_sent=raw["bytes_sent"] if has_flow else None,
                flow_samples=raw["flow_samples"] if has_flow else None,
                flow_skbs=raw["flow_skbs"] if has_flow else None,
                approx=["snd_cwnd", "snd_ssthresh"] if cong else [],
            ),
            env,
        )
    ]


def _resets_and_retransmits(raw: Raw) -> dict[str, Any]:
    """The fold's sums of the resets and retransmissions (each also a record of its own)."""
    retrans, resets, how = int(raw["retrans"]), int(raw["resets"]), int(raw["reset_how"])
    return dict(
        retransmits=retrans,
        first_retransmit_us=int(raw["retrans_first_us"]) if retrans else None,
        last_retransmit_us=int(raw["retrans_last_us"]) if retrans else None,
        resets=resets,
        reset_sender=("peer" if how & FOLD_RST_PEER else "local") if resets else None,
        reset_state=state_name(how & FOLD_STATE) if resets else None,
        reset_us=int(raw["reset_us"]) if resets else None,
    )


def _into_time_wait(first_old: int, linux: list[int], codes: list[int]) -> bool:
    """Whether the last change folded put the socket in TIME_WAIT (state_records' rule)."""
    old = linux[-2] if len(linux) > 1 else first_old
    last = codes[-1]
    return into_time_wait(old, linux[-1], last & FOLD_ERR, bool(last & FOLD_FIN))


def _ints(values: Any) -> list[int]:
    """A fixed array of the body (a numpy array from the ring, a list from a test) as ints."""
    return [int(x) for x in values]


ENVELOPE = (
    "schema", "host_id", "boot_id", "netns", "conn_uuid", "sock_cookie", "pid", "tgid", "comm", "uid", "gid",
    "cgroup_id", "attribution", "ip_ver", "src", "sport", "dst", "dport",
)  # fmt: skip


def expand(record: KernelRecord) -> list[Record]:
    """The tcp_state, tcp_cong_state, flow_counters and connection records the socket streams
    without the fold, in the order it streams them (a partial lifecycle: the changes only)."""
    rec = as_struct(record)
    if not isinstance(rec, TcpLifecycle):
        raise TypeError(f"expand() takes a tcp_lifecycle record, not {rec.kind}")
    env = KernelEnv(rec.host_id, rec.boot_id, wall_offset=rec.ts_wall - rec.ts_ns / 1e9)
    own = {name: getattr(rec, name) for name in ENVELOPE}
    out: list[Record] = []
    old = rec.linux_prev_state
    for i, new in enumerate(rec.linux_states):
        if rec.congestion_changes and rec.congestion_after == i:
            out.append(_cong(rec, own, env))
        base = _base(own, env, rec.born_ns or 0, rec.state_us[i], "state-change", "tp_btf/inet_sock_set_state")
        base["ctx"] = rec.state_ctx[i]
        errored = rec.state_error[i]
        fin = rec.state_peer_closed[i] if rec.state_peer_closed is not None and i < len(rec.state_peer_closed) else None
        prev = old if old is not None else new
        out += [as_struct(r) for r in state_records(base, prev, new, int(errored), env, fin)]
        old = new
    if rec.congestion_changes and (rec.congestion_after or 0) >= len(rec.linux_states):
        out.append(_cong(rec, own, env))
    if rec.partial:
        return out
    end = {**own, "seq": 0, "ts_ns": rec.ts_ns, "ts_wall": rec.ts_wall, "cpu": rec.cpu, "ctx": rec.ctx, "hook": HOOK}
    flow = _flow(rec, end)
    if flow is not None:
        out.append(flow)
    duration = round(rec.ts_wall - rec.start, 6) if rec.start is not None else None
    out.append(
        Connection(
            **end,
            provider="tcp",
            probe="destroy",
            proto="tcp",
            source="kernel",
            start=rec.start,
            end=rec.ts_wall,
            duration=duration,
            state=rec.state,
            bytes_acked=rec.bytes_acked,
            bytes_received=rec.bytes_received,
            segs_in=rec.segs_in,
            segs_out=rec.segs_out,
            total_retrans=rec.total_retrans,
            lifetime_ns=rec.lifetime_ns,
            conn_state=rec.conn_state,
            history=rec.history,
            direction_guessed=rec.direction_guessed,
        )
    )
    return out


RECENT_MAX = 4096  # lifecycles whose expansion expand_shared() keeps (a poll's batch)
_recent: OrderedDict[int, tuple[KernelRecord, list[Record]]] = OrderedDict()


def expand_shared(record: KernelRecord) -> list[Record]:
    """expand(), made once for a lifecycle the collector's live summary and its rules both
    read (analysis/flows/live_summary.py, analysis/alerts/folded.py): the same part objects
    for both, the last RECENT_MAX lifecycles kept (by identity; each kept alive meanwhile)."""
    key = id(record)
    hit = _recent.get(key)
    if hit is not None and hit[0] is record:
        return hit[1]
    parts = expand(record)
    _recent[key] = (record, parts)
    if len(_recent) > RECENT_MAX:
        _recent.popitem(last=False)
    return parts


def final_flow(record: KernelRecord) -> FlowCounters | None:
    """The final flow_counters a socket's lifecycle holds (None: partial, or siftr did not
    follow it): what the collector's H2 report counts segments and samples from."""
    rec = as_struct(record)
    if not isinstance(rec, TcpLifecycle) or rec.partial:
        return None
    end = {name: getattr(rec, name) for name in ENVELOPE}
    end.update(seq=0, ts_ns=rec.ts_ns, ts_wall=rec.ts_wall, cpu=rec.cpu, ctx=rec.ctx, hook=HOOK)
    return _flow(rec, end)


def _flow(rec: TcpLifecycle, end: dict[str, Any]) -> FlowCounters | None:
    if rec.bytes_sent is None:
        return None
    return FlowCounters(
        **end, provider="siftr", probe="flow-counters", proto="tcp", packets_in=rec.segs_in or 0,
        packets_out=rec.segs_out or 0, bytes_in=rec.bytes_received or 0, bytes_out=rec.bytes_sent,
        samples=rec.flow_samples or 0, skbs=rec.flow_skbs,
    )  # fmt: skip


def _base(own: dict[str, Any], env: KernelEnv, born_ns: int, us: int, probe: str, hook: str) -> dict[str, Any]:
    ts = born_ns + us * 1000
    return {**own, "seq": 0, "ts_ns": ts, "ts_wall": env.wall(ts), "provider": "tcp", "probe": probe, "hook": hook}


def _cong(rec: TcpLifecycle, own: dict[str, Any], env: KernelEnv) -> TcpCongState:
    base = _base(own, env, rec.born_ns or 0, rec.congestion_us or 0, "cong-state", "tp_btf/tcp_cong_state_set")
    return TcpCongState(
        **base, ctx=rec.congestion_ctx, prev_ca_state=rec.prev_ca_state, ca_state=rec.ca_state or "Open",
        snd_cwnd=rec.snd_cwnd, snd_ssthresh=rec.snd_ssthresh, approx=["snd_cwnd", "snd_ssthresh"],
    )  # fmt: skip

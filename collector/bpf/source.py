"""Kernel events -> records: drains the ring buffer, translates by kind, accounts for loss.

One `poll()` drains what is in the ring (whole batches viewed as numpy arrays, see
ringbuf.py), translates them through translators.registry in arrival order, adds
LossReport records when the kernel's lost counters moved and, every
`flow_interval` seconds, FlowCounters for flows whose exact counters changed; each
socket's connection summary gets its Zeek conn_state and history (analysis.flows.live_summary).
Sequence numbers start at CLOCK_MONOTONIC in ns when the source starts, so they
stay unique within a boot across collector restarts (ingest is idempotent on
(host, boot, seq)); within a run they are consecutive.
Keep in sync with: collector/bpf/layout.py (event kinds), translators/registry.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from analysis.flows.live_summary import LiveSummaries
from collector.bpf import layout
from collector.bpf.loader import FOLD_POLL_S, KernelSession, fold_window_ms, skb_window
from collector.bpf.poll import SiftrPoller
from collector.bpf.windows import SkbWindows
from translators import kernel
from translators.ip_flows import translate_ip_flow
from translators.kernel import KernelEnv, KernelRecord, Raw, collector_envelope
from translators.records import LossReport
from translators.registry import KERNEL_BATCH_TRANSLATORS, KERNEL_TRANSLATORS, PACKET_KINDS
from translators.siftr import translate_flow
from translators.skb import translate_drop_count
from translators.tcp_lifecycle import final_flow
from translators.udp import translate_flow as translate_udp_flow

HEADER_NAMES = tuple(n for n in layout.HEADER_DTYPE.names or () if not n.startswith("_"))
FLOW_NAMES = tuple(n for n, _ in layout.FLOW)
TUPLE_NAMES = ("family", "saddr", "daddr", "sport", "dport")
MAX_TUPLES = 200_000
WALL_RESAMPLE_S = 10.0
# Rows translated at a time: a full ring read (65536 events) as one column set is
# a third slower per event than 4096-row pieces, whose columns stay in the CPU caches.
CHUNK = 4096
IP_FLOW_COUNTS = ("packets", "bytes", "samples", "first_ns", "last_ns")
IP_SLOT_HASH = (  # kmod/ip.bpf.c, ip_slot_index: one odd multiplier per 8 bytes of the key
    0x9E3779B97F4A7C15,
    0xC2B2AE3D27D4EB4F,
    0x165667B19E3779F9,
    0xD6E8FEB86659FD93,
    0xFF51AFD7ED558CCD,
    0xC4CEB9FE1A85EC53,
)


def ip_slot_index(key: np.void) -> int:
    """The slot of an ip_flows key within its CPU's NT_IP_SLOTS (kmod/ip.bpf.c, ip_slot_index)."""
    words = np.frombuffer(key.tobytes(), dtype="<u8")
    x = sum(int(w) * m for w, m in zip(words, IP_SLOT_HASH, strict=True)) & ((1 << 64) - 1)
    return x >> (64 - (layout.IP_SLOTS_PER_CPU.bit_length() - 1))


# Counter slots of no ring event (ip-flows' entries created and packets it could not count)
NOT_RING = frozenset({layout.EV_IP_FLOW, layout.EV_IP_UNCOUNTED})


def wall_offset() -> float:
    """CLOCK_REALTIME - CLOCK_MONOTONIC now, seconds (providers.md 9.5)."""
    return time.time() - time.monotonic()


@dataclass
class Totals:
    received: dict[str, int] = field(default_factory=dict)
    lost: dict[str, int] = field(default_factory=dict)
    generated: dict[str, int] = field(default_factory=dict)
    malformed: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)  # program -> runs the kernel skipped (recursion)

    def summary(self) -> str:
        received = sum(self.received.values())
        lost = sum(self.lost.values())
        parts = [f"{name} {n}" for name, n in sorted(self.lost.items()) if n]
        line = f"events received {received}, lost {lost}"
        if parts:
            line += " (" + ", ".join(parts) + ")"
        malformed = sum(self.malformed.values())
        line += f", malformed {malformed}" if malformed else ""
        # the ring's events the programs made (received + lost, when nothing is left unread)
        line += f", generated {sum(self.generated.values())}"
        skipped = {name: n for name, n in sorted(self.skipped.items()) if n}
        if skipped:
            each = ", ".join(f"{name} {n}" for name, n in skipped.items())
            line += f", program runs the kernel skipped {sum(skipped.values())} ({each})"
        return line


class KernelSource:
    def __init__(self, session: KernelSession, env: KernelEnv, flow_interval: float = 1.0) -> None:
        self.session = session
        self.env = env
        self.flow_interval = flow_interval
        self.seq = time.monotonic_ns()
        self.totals = Totals()
        self.received = np.zeros(layout.EV_MAX, dtype=np.int64)
        self.lost_seen = np.zeros(layout.EV_MAX, dtype=np.int64)
        self.skipped_seen: dict[str, int] = {}  # program -> recursion misses at the last report
        self.malformed_seen: dict[str, int] = {}  # event type -> undecodable events at the last report
        self.flow_meta: dict[int, dict[str, Any]] = {}  # cookie -> header of a sample, for map reads
        self.flow_seen: dict[int, int] = {}  # cookie -> skbs at the last FlowCounters
        self.drop_seen: dict[tuple[int, int, int], int] = {}  # (location, reason, protocol) -> last count
        self.udp_seen: dict[bytes, tuple[int, int]] = {}  # udp_flows key -> packets at the last report
        self.ip_seen: dict[bytes, tuple[int, int, int]] = {}  # ip_flows key -> (first_ns, packets, bytes) reported
        self.ip_evicted = 0  # ip_flows entries the LRU evicted (created - present), reported as loss
        self.ip_uncounted = 0  # packets not counted: their new entry was evicted at once
        self.tuples: dict[int, dict[str, Any]] = {}  # cookie -> 4-tuple while the socket had a port
        # exact-counter records (flow_counters, ip_flow_counters, drop_count) since the consumer
        # last emptied it: the sampling meter compares them with what was emitted (H2)
        self.counter_records: list[KernelRecord] = []
        # skb-lifecycle's exact counts (lifetimes seen, followed), read with the maps
        self.skb_lifetimes = (0, 0)
        # skb-lifecycle's windows (--skb-window), opened and closed by poll
        spec = skb_window(session.opts) if session is not None else None  # None: a source that only translates
        self.skb_windows = SkbWindows(session, spec) if spec is not None else None
        # siftr-poll's polls of every followed socket, run by poll before it reads the ring;
        # without siftr-poll, tcp --tcp-fold's flush of the sockets folded past the window
        self.siftr_poller = self._poller(session) if session is not None else None
        # Zeek conn_state/history of each socket's summary, from the events before it
        self.summaries = LiveSummaries()
        self.next_flow = time.monotonic() + flow_interval
        self.next_wall = time.monotonic() + WALL_RESAMPLE_S

    @staticmethod
    def _poller(session: KernelSession) -> SiftrPoller | None:
        opts = session.opts
        if "siftr-poll" in opts.providers:
            interval = opts.poll_interval_s
        elif fold_window_ms(opts, session.iter_why):
            interval = min(FOLD_POLL_S, opts.fold_window_s)
        else:
            return None
        return SiftrPoller(session, interval, time.monotonic(), opts.filters.netns)

    def take_over(self, before: KernelSource) -> None:
        """Go on from what the source of the session this one follows (a swap of its
        programs) knew of each socket: its 4-tuple while it had a port, its summary so far
        (the Zeek history), its SIFTR samples' header. Not the counters' baselines: the new
        session's maps are fresh."""
        self.tuples = before.tuples
        self.summaries = before.summaries
        self.flow_meta = before.flow_meta
        self.seq = max(self.seq, before.seq)

    # -- the loop body ---------------------------------------------------------------------
    def poll(self, timeout: float = 0.1, final: bool = False) -> list[KernelRecord]:
        """Wait up to timeout for events, then everything available as records."""
        reader = self.session.reader
        if reader is None:
            return []
        if not final and not reader.pending():
            reader.wait(timeout)
        if self.siftr_poller is not None and not final:
            self.siftr_poller.tick(time.monotonic())
        out: list[KernelRecord] = []
        for _ in range(64):  # bounded: a busy ring yields the loop back to the caller
            raw = reader.read()
            if not raw.size:
                break
            out.extend(self.translate(raw))
        now = time.monotonic()
        if self.skb_windows is not None and not final:
            self.skb_windows.tick(now)
        if now >= self.next_wall:
            self.env.wall_offset = wall_offset()
            self.next_wall = now + WALL_RESAMPLE_S
        if final or now >= self.next_flow:
            if len(self.counter_records) > MAX_TUPLES:
                self.counter_records.clear()  # nobody consumes them (a bare KernelSource): stay bounded
            periodic = [*self.flow_counters(), *self.drop_counts(), *self.udp_flow_counters(), *self.ip_flow_counters()]
            if "skb-lifecycle" in self.session.opts.providers:
                self.skb_lifetimes = self.session.skb_sampling()
            out.extend(periodic)
            self.counter_records.extend(periodic)
            out.extend(self.skipped_runs())  # a syscall per program: read with the maps, not every poll
            self.next_flow = now + self.flow_interval
        out.extend(self.loss_reports())
        out.extend(self.malformed_reports())
        return self.number(self.summaries.fold(out))

    def number(self, records: list[KernelRecord]) -> list[KernelRecord]:
        self.seq = kernel.number(records, self.seq)
        return records

    # -- translation -----------------------------------------------------------------------
    def translate(self, raw: np.ndarray) -> list[KernelRecord]:
        """A batch of raw struct nt_event rows -> records, in arrival order."""
        if len(raw) <= CHUNK:
            return self._translate(raw)
        out: list[KernelRecord] = []
        for start in range(0, len(raw), CHUNK):
            out.extend(self._translate(raw[start : start + CHUNK]))
        return out

    def _translate(self, raw: np.ndarray) -> list[KernelRecord]:
        events = raw.view(layout.EVENT_DTYPE)
        types = events["type"]
        rowed: dict[int, list[KernelRecord]] = {}  # position -> records of a row-by-row kind
        batched: list[tuple[list[int], list[KernelRecord]]] = []  # (positions, one record each)
        for t in np.unique(types).tolist():
            idx = np.flatnonzero(types == t)
            self.received[t % layout.EV_MAX] += len(idx)
            name = layout.EVENT_NAMES.get(t)
            if name is None:
                self._malformed(f"type {t}", len(idx))
                continue
            typed = raw[idx].view(layout.EVENT_DTYPES[t])
            if name in KERNEL_BATCH_TRANSLATORS and self.env.wire and not kernel.VALIDATE:
                try:
                    batched.append((idx.tolist(), self._batch(name, typed)))  # the high-rate kinds, column-wise
                    continue
                except ValueError:  # a malformed event in the batch: row by row finds and counts it
                    pass
            self._translate_rows(name, layout.FIELD_NAMES[t], idx.tolist(), typed.tolist(), rowed)
        if len(self.tuples) > MAX_TUPLES:  # sockets whose destroy we never saw (tcp provider off)
            self.tuples.clear()
        return _in_arrival_order(batched, rowed)

    def _translate_rows(
        self,
        name: str,
        names: tuple[str, ...],
        positions: list[int],
        rows: list[tuple[Any, ...]],
        slots: dict[int, list[KernelRecord]],
    ) -> None:
        fn: Callable[[Raw, KernelEnv], list[KernelRecord]] = KERNEL_TRANSLATORS[name]
        env = self.env
        remember = name == "siftr_sample"
        forget = name == "flow_counters"
        folded = name == "tcp_lifecycle"  # --tcp-fold: a socket's end (unless partial) and its final flow
        # packet records are source first: they must not teach a socket its (local-first) tuple
        tuples = self.tuples if name not in PACKET_KINDS else {}
        for pos, row in zip(positions, rows, strict=True):
            fields = dict(zip(names, row, strict=True))
            cookie = fields["cookie"]
            if fields["sport"]:
                if cookie and cookie not in tuples:
                    tuples[cookie] = {k: fields[k] for k in TUPLE_NAMES}
            elif cookie in tuples:
                # At X -> CLOSE the kernel has already released the local port: use the socket's tuple.
                fields.update(tuples[cookie])
                if name == "tcp_destroy" or (folded and not fields["partial"]):
                    del tuples[cookie]
            if remember and cookie not in self.flow_meta:
                self.flow_meta[cookie] = {k: fields[k] for k in HEADER_NAMES}
            elif forget:
                self.flow_meta.pop(cookie, None)
                self.flow_seen.pop(cookie, None)
            try:
                slots[pos] = fn(fields, env)
            except (ValueError, TypeError):
                self._malformed(name, 1)
                continue
            if forget:  # a flow's final counters (tcp_destroy_sock)
                self.counter_records.extend(slots[pos])
            elif folded and fields["has_flow"] and not fields["partial"]:  # the same, folded
                self.flow_meta.pop(cookie, None)
                self.flow_seen.pop(cookie, None)
                self.counter_records.extend(filter(None, map(final_flow, slots[pos])))

    def _batch(self, name: str, typed: np.ndarray) -> list[KernelRecord]:
        if name == "siftr_sample":
            self._remember_flows(typed)
        return KERNEL_BATCH_TRANSLATORS[name](typed, self.env)

    def _remember_flows(self, typed: np.ndarray) -> None:
        """First sighting of a SIFTR flow: its header (for map-read FlowCounters) and 4-tuple."""
        cookies = typed["cookie"].tolist()
        meta, tuples = self.flow_meta, self.tuples
        if all(c in meta and c in tuples for c in set(cookies)):
            return  # the steady state: every flow of the chunk is known
        for i, cookie in enumerate(cookies):
            if cookie not in meta or cookie not in tuples:
                fields = dict(zip(layout.FIELD_NAMES[layout.EV_SIFTR], typed[i].tolist(), strict=True))
                self.flow_meta.setdefault(cookie, {k: fields[k] for k in HEADER_NAMES})
                if cookie and fields["sport"]:
                    self.tuples.setdefault(cookie, {k: fields[k] for k in TUPLE_NAMES})

    def _malformed(self, name: str, n: int) -> None:
        self.totals.malformed[name] = self.totals.malformed.get(name, 0) + n

    # -- exact counters and loss -----------------------------------------------------------
    def flow_counters(self) -> list[KernelRecord]:
        """FlowCounters for flows whose counters moved since the last report (map read)."""
        if not {"siftr", "siftr-poll"} & set(self.session.opts.providers):
            return []
        out: list[KernelRecord] = []
        now = time.monotonic_ns()
        for cookie, flow in self.session.flows().items():
            meta = self.flow_meta.get(cookie)
            # every buffer siftr sees moves it (siftr-poll: every segment); the counters move only then
            skbs = int(flow["skbs"])
            if meta is None or self.flow_seen.get(cookie) == skbs:
                continue
            self.flow_seen[cookie] = skbs
            raw = {**meta, **{k: int(flow[k]) for k in FLOW_NAMES}, "ts_ns": now, "periodic": True}
            out.extend(translate_flow(raw, self.env))
        return out

    def drop_counts(self) -> list[KernelRecord]:
        """DropCount for every (reason, location, protocol) whose exact count moved."""
        if not {"skb", "skb-lifecycle"} & set(self.session.opts.providers):
            return []
        out: list[KernelRecord] = []
        now = time.monotonic_ns()
        for key, count in self.session.drops():
            ident = (int(key["location"]), int(key["reason"]), int(key["protocol"]))
            before = self.drop_seen.get(ident, 0)
            if count != before:
                self.drop_seen[ident] = count
                out.append(translate_drop_count(self.env, *ident, count=count, delta=count - before, ts_ns=now))
        return out

    def udp_flow_counters(self) -> list[KernelRecord]:
        """FlowCounters (proto udp) for every wire direction whose exact counts moved."""
        if "udp" not in self.session.opts.providers:
            return []
        out: list[KernelRecord] = []
        now = time.monotonic_ns()
        for key, counts in self.session.udp_flows():
            ident = key.tobytes()
            packets = (int(counts["packets_out"]), int(counts["packets_in"]))
            if self.udp_seen.get(ident) == packets:
                continue
            self.udp_seen[ident] = packets
            k = {name: key[name] for name in ("netns", "sport", "dport", "family", "protocol")}
            k.update(saddr=bytes(key["saddr"]), daddr=bytes(key["daddr"]))
            c = {name: int(counts[name]) for name in ("packets_out", "bytes_out", "packets_in", "bytes_in")}
            out.append(
                translate_udp_flow(
                    {n: int(v) if not isinstance(v, bytes) else v for n, v in k.items()}, c, self.env, now
                )
            )
        return out

    def ip_flow_counters(self) -> list[KernelRecord]:
        """IpFlowCounters for every ip_flows entry that moved, and a LossReport when entries
        were evicted (their packets since the last report are unknown: created - present)."""
        if "ip-flows" not in self.session.opts.providers:
            return []
        out: list[KernelRecord] = []
        now = time.monotonic_ns()
        sample = self.session.opts.ip_sample
        # read before the walk: an entry created meanwhile then makes created - present
        # too small for one interval (caught up next time), never too large
        counters = self.session.counters()
        created = int(counters[:, 0, layout.EV_IP_FLOW].sum())
        uncounted = int(counters[:, 0, layout.EV_IP_UNCOUNTED].sum())
        entries, orphans = self._ip_flow_entries()
        present: dict[bytes, tuple[int, int, int]] = {}
        for ident, (key, counts) in entries.items():
            state = (counts["first_ns"], counts["packets"], counts["bytes"])
            present[ident] = state
            before = self.ip_seen.get(ident)
            if before is not None and before[0] != state[0]:
                before = None  # evicted and recreated since: everything in it is new
            if before is not None and before[1] == state[1]:
                continue
            delta = (state[1] - before[1], state[2] - before[2]) if before else (state[1], state[2])
            names = ("netns", "if_index", "sport", "dport", "version", "protocol", "direction")
            k: dict[str, Any] = {name: int(key[name]) for name in names}
            k.update(saddr=bytes(key["saddr"]), daddr=bytes(key["daddr"]))
            out.append(translate_ip_flow(k, counts, delta, self.env, now, sample))
        self.ip_seen = present
        evicted = max(self.ip_evicted, created - len(present))
        if evicted != self.ip_evicted:
            out.append(self._ip_flow_loss("ip_flow_counters", evicted - self.ip_evicted, evicted, created, now))
            self.ip_evicted = evicted
        # packets counted in a slot for an entry the LRU has evicted since: the kernel adds
        # them to its count when the slot is taken; until then they are counted here (never
        # less than reported: a slot moved between the two reads is caught up next time)
        uncounted = max(self.ip_uncounted, uncounted + orphans)
        if uncounted != self.ip_uncounted:  # a packet whose new entry was evicted before it was counted
            out.append(self._ip_flow_loss("ip_flow_packets", uncounted - self.ip_uncounted, uncounted, None, now))
            self.ip_uncounted = uncounted
        return out

    def _ip_flow_entries(self) -> tuple[dict[bytes, tuple[np.void, dict[str, int]]], int]:
        """Every ip_flows entry (key bytes -> (key, packets, bytes, samples, first_ns,
        last_ns)) with the counts of the per-CPU slots holding its key for it added, and
        the packets in slots whose entry the LRU evicted (kmod/ip.bpf.c, ip_slot_take).
        The kernel moves a slot's counts into its entry when another flow takes the slot,
        so a slot is used only if it held the same key at the same even seq before and
        after the entries were read; a key whose slot moved is read again on its own
        (its slots, its entry, its slots) until that holds: each packet is counted once,
        in a slot or in the entry."""
        before = self.session.ip_slots()
        entries: dict[bytes, tuple[np.void, dict[str, int]]] = {}
        for key, value in self.session.ip_flows():
            ident = key.tobytes()
            if ident not in entries:  # the walk restarts after a concurrent eviction
                entries[ident] = (key, {n: int(value[n]) for n in IP_FLOW_COUNTS})
        after = self.session.ip_slots()
        used = (before["key"]["version"] != 0) | (after["key"]["version"] != 0)
        still = (before["seq"] == after["seq"]) & (before["seq"] % 2 == 0) & (before["key"] == after["key"])
        moved: dict[bytes, np.void] = {}
        orphans = 0
        for i in np.flatnonzero(used & ~still):
            for slot in (before[i], after[i]):
                if slot["key"]["version"]:
                    moved[slot["key"].tobytes()] = slot["key"]
        for i in np.flatnonzero(used & still):
            if before[i]["key"].tobytes() not in moved:
                orphans += self._ip_slot_add(entries, before[i])
        for ident, key in moved.items():
            entries.pop(ident, None)
            slots, entry = self._ip_flow_settled(key)
            if entry is not None:
                entries[ident] = (key, {n: int(entry[n]) for n in IP_FLOW_COUNTS})
            for slot in slots:
                orphans += self._ip_slot_add(entries, slot)
        return entries, orphans

    def _ip_flow_settled(self, key: np.void) -> tuple[list[np.void], np.void | None]:
        """One key's entry and the slots holding that key, read between two equal, even
        seqs of each slot the key can be in (one per CPU)."""
        at = [cpu * layout.IP_SLOTS_PER_CPU + ip_slot_index(key) for cpu in range(self.session.ncpus)]
        ident = key.tobytes()
        value: np.void | None = None
        for _ in range(100):  # bounded: a slot taken again and again by colliding flows
            before = self.session.ip_slots(at)
            value = self.session.ip_flow(key)
            after = self.session.ip_slots(at)
            if (before["seq"] == after["seq"]).all() and (before["seq"] % 2 == 0).all():
                if (before["key"] == after["key"]).all():
                    break
        return [s for s in before if s["key"].tobytes() == ident], value

    @staticmethod
    def _ip_slot_add(entries: dict[bytes, tuple[np.void, dict[str, int]]], slot: np.void) -> int:
        """Add a slot's counts to its entry; the packets it holds for no entry (evicted, or
        evicted and made again: another first_ns) are returned instead."""
        found = entries.get(slot["key"].tobytes())
        if found is None or found[1]["first_ns"] != int(slot["first_ns"]):
            return int(slot["packets"])
        counts = found[1]
        counts["packets"] += int(slot["packets"])
        counts["bytes"] += int(slot["bytes"])
        counts["last_ns"] = max(counts["last_ns"], int(slot["last_ns"]))
        return 0

    def _ip_flow_loss(self, what: str, lost: int, total: int, created: int | None, now: int) -> LossReport:
        return LossReport(
            **collector_envelope(self.env, "evicted", "map/ip_flows", ts_ns=now),
            event_type=what,
            lost=lost,
            lost_total=total,
            received_total=created,
        )

    def loss_reports(self) -> list[KernelRecord]:
        counters = self.session.counters().astype(np.int64)  # (ncpu, 2, EV_MAX)
        lost_per_cpu = counters[:, 1, :]
        lost = lost_per_cpu.sum(axis=0)
        generated = counters[:, 0, :].sum(axis=0)
        out: list[KernelRecord] = []
        for t in np.flatnonzero(lost != self.lost_seen).tolist():
            name = layout.EVENT_NAMES.get(t, f"type {t}")
            out.append(
                LossReport(
                    **collector_envelope(self.env, "loss", "map/counters"),
                    event_type=name,
                    lost=int(lost[t] - self.lost_seen[t]),
                    lost_total=int(lost[t]),
                    received_total=int(self.received[t]),
                    per_cpu=[int(x) for x in lost_per_cpu[:, t]],
                )
            )
        self.lost_seen = lost
        for t, name in layout.EVENT_NAMES.items():
            self.totals.received[name] = int(self.received[t])
            self.totals.lost[name] = int(lost[t])
            if t not in NOT_RING:
                self.totals.generated[name] = int(generated[t])
        return out

    def malformed_reports(self) -> list[KernelRecord]:
        """A LossReport per event type whose count of events read but not decodable moved:
        such an event is lost to the trace like one the ring had no room for."""
        out: list[KernelRecord] = []
        for name, total in self.totals.malformed.items():
            before = self.malformed_seen.get(name, 0)
            if total != before:
                out.append(
                    LossReport(
                        **collector_envelope(self.env, "malformed", "decode"),
                        event_type=name,
                        lost=total - before,
                        lost_total=total,
                    )
                )
                self.malformed_seen[name] = total
        return out

    def skipped_runs(self) -> list[KernelRecord]:
        """A LossReport per program whose count of skipped runs moved: the kernel does not
        nest a program inside itself on one CPU, so a tracepoint an interrupt hits while the
        program runs there is dropped before the program sees it (bpf_prog_info)."""
        out: list[KernelRecord] = []
        for prog, total in self.session.recursion_misses().items():
            before = self.skipped_seen.get(prog, 0)
            if total != before:
                out.append(
                    LossReport(
                        **collector_envelope(self.env, "skipped", f"prog/{prog}"),
                        event_type=f"{prog} runs",
                        lost=total - before,
                        lost_total=total,
                    )
                )
            self.skipped_seen[prog] = total
            self.totals.skipped[prog] = total
        return out


def _in_arrival_order(
    batched: list[tuple[list[int], list[KernelRecord]]], rowed: dict[int, list[KernelRecord]]
) -> list[KernelRecord]:
    """The records of one chunk ordered by the position of their event (a row-by-row event
    may give several records, which keep their order): one stable sort, no per-event lists."""
    if not rowed and len(batched) == 1:
        return batched[0][1]
    records: list[KernelRecord] = []
    positions: list[int] = []
    for where, recs in batched:
        records += recs
        positions += where
    for pos, recs in rowed.items():
        records += recs
        positions += [pos] * len(recs)
    order = np.argsort(np.asarray(positions, dtype=np.int64), kind="stable").tolist()
    return list(map(records.__getitem__, order))

"""The collector's self-health records for each poll: sampling ratios (H2) and overhead (H4).

``SelfHealth.add`` is called by live.Extras with every poll's records and returns the
records to append: a ``sampling_report`` per sampled event type when the source has
just read its exact counters (once per ``--flow-interval``), and a ``collector_stats``
every ``--stats-interval`` seconds. The start-up ``collector_status`` (H3) is built by
coverage.collector_status. Keep in sync with nettrail/commands/collect.py and
collector/bpf/source.py (received, counter_records, next_flow).
"""

from __future__ import annotations

import time

from collector.bpf import layout
from collector.bpf.loader import Options, skb_window
from collector.bpf.source import KernelSource
from collector.health.overhead import DEFAULT_INTERVAL_S, OverheadMeter
from collector.health.sampling import SamplingMeter
from collector.stack_counters import StackCounters
from translators.kernel import KernelEnv, KernelRecord


def sampling_meter(opts: Options) -> SamplingMeter:
    """The meter for what these options sample (nothing sampled: an inactive meter)."""
    chosen = set(opts.providers)
    return SamplingMeter(
        ppl=opts.ppl if "siftr" in chosen else 1,
        ip_sample=opts.ip_sample if "ip-flows" in chosen else 0,
        drop_rate=opts.drop_rate if chosen & {"skb", "skb-lifecycle"} else 0,
        ip_records="ip" in chosen,
        skb_sample=opts.skb_sample if "skb-lifecycle" in chosen else 1,
        skb_window=skb_window(opts),
        poll_interval_s=opts.poll_interval_s if "siftr-poll" in chosen else None,
    )


class SelfHealth:
    def __init__(
        self, source: KernelSource, env: KernelEnv, stats_interval_s: float = DEFAULT_INTERVAL_S,
        counters: StackCounters | None = None,
    ) -> None:  # fmt: skip
        self.source = source
        self.env = env
        self.counters = counters  # the stack counters' reader: the namespaces it missed go in collector_stats
        self.sampling = sampling_meter(source.session.opts)
        # the programs' kernel time (a stand-in session without programs: unknown)
        programs = getattr(source.session, "program_infos", None)
        self.overhead = OverheadMeter(lambda: source.received, stats_interval_s, programs)
        self.drops_seen = int(source.received[layout.EV_SKB_DROP])
        self.lifetimes_seen = source.skb_lifetimes
        self.open_seen = 0.0  # the source's windows' open time at the last poll
        self.next_flow = source.next_flow

    def add(self, records: list[KernelRecord], final: bool = False, stopping: bool = False) -> list[KernelRecord]:
        """`final`: the session's last poll; `stopping`: the collector's (not a swap's)."""
        out: list[KernelRecord] = []
        src = self.source
        if self.sampling.active:
            drops = int(src.received[layout.EV_SKB_DROP])
            now = src.skb_lifetimes
            lifetimes = (now[0] - self.lifetimes_seen[0], now[1] - self.lifetimes_seen[1])
            windows = src.skb_windows
            open_now = windows.open_total(time.monotonic()) if windows is not None else 0.0
            self.sampling.observe(src.counter_records, drops - self.drops_seen, lifetimes, open_now - self.open_seen)
            self.open_seen = open_now
            self.drops_seen = drops
            self.lifetimes_seen = now
            if final or src.next_flow != self.next_flow:  # this poll read the exact counters: a window ends
                out.extend(self.sampling.records(self.env))
        src.counter_records.clear()
        self.next_flow = src.next_flow
        self.overhead.count(len(records))
        if self.overhead.due(final):
            poller = src.siftr_poller
            polls = {}
            if poller is not None:  # what the polls managed: their pace and the namespaces they missed
                missed = {str(inode): why for inode, why in sorted(poller.unreached.items())}
                polls = {"poll_interval_s": poller.interval_now, "poll_missed": missed}
            if self.counters is not None:
                polls["counters_missed"] = self.counters.take_missed()
            out.append(self.overhead.record(self.env, stopped=final and stopping, **polls))
        return out

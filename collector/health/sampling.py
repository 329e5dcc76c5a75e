"""H2 sampling ratio per window: the kernel's exact counts against the records emitted.

Four event types are sampled or rate-limited in the kernel:

* ``siftr_sample`` (``--ppl N``): the ``flows`` map counts every buffer siftr saw of a flow
  (``skbs``: the kernel samples buffer 0, N, 2N, ...) and the samples it emitted;
  ``flow_counters`` records carry both (periodic map reads and the final one at
  tcp_destroy_sock), so the window's ratio is Δskbs / Δsamples. Not Δpackets: those are
  the socket's segments, several to a GSO or GRO buffer. With siftr-poll (a sample per
  socket per ``--poll-interval`` when it moved), ``skbs`` is the socket's segments in and
  out, so the ratio is segments per polled sample.
* ``ip_packet`` (ip-flows with ``--ip-sample N``): ``ip_flow_counters`` carry
  ``packets_delta`` and the entry's ``samples`` total.
* ``skb_drop`` (``--drop-rate N``): ``drop_count`` deltas are every drop; the drop
  events read from the ring in the window are what was emitted.
* ``skb_event`` (skb-lifecycle with ``--skb-sample N``): the ``skb_sampling`` per-CPU
  counts of buffer lifetimes started and followed (read with the other maps, once per
  ``--flow-interval``); observed is lifetimes, emitted is lifetimes followed (each gives
  several ``skb_event`` records, one per stage).

``SamplingMeter.records`` turns one window's counts into ``sampling_report`` records
(one per sampled event type whose kernel count moved). Events lost in the ring are H1's
business (loss_report), not sampling. Keep in sync with collector/bpf/source.py
(counter_records), translators/records.SamplingReport and docs/collector.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from translators.kernel import KernelEnv, KernelRecord, collector_envelope
from translators.records import SamplingReport
from translators.skb_window import WindowSpec

MAX_FLOWS = 200_000  # per-flow totals kept; beyond, the oldest half is forgotten (one window's delta is lost)


def _get(rec: Any, name: str) -> Any:
    return rec[name] if isinstance(rec, dict) or hasattr(rec, "__getitem__") else getattr(rec, name)


class SamplingMeter:
    def __init__(
        self, ppl: int, ip_sample: int, drop_rate: int, ip_records: bool = False, skb_sample: int = 1,
        skb_window: WindowSpec | None = None, poll_interval_s: float | None = None,
    ) -> None:  # fmt: skip
        self.settings: dict[str, str] = {}
        if ppl > 1:
            self.settings["siftr_sample"] = f"ppl {ppl}"
        elif poll_interval_s is not None:
            self.settings["siftr_sample"] = f"poll-interval {poll_interval_s:g} s"
        if ip_sample > 0 and not ip_records:  # the ip provider itself records every packet
            self.settings["ip_packet"] = f"ip-sample {ip_sample}"
        if drop_rate > 0:
            self.settings["skb_drop"] = f"drop-rate {drop_rate}/s per CPU"
        if skb_sample > 1 or skb_window is not None:
            self.settings["skb_event"] = ", ".join(
                [f"skb-sample {skb_sample}"] + ([f"skb-window {skb_window.arg()}"] if skb_window else [])
            )
        self.windowed = skb_window is not None
        self.open_s = 0.0  # skb-lifecycle's windows' open time in this report window
        self.flows: dict[Any, tuple[int, int]] = {}  # flow -> (skbs, samples) last reported
        self.ip_entries: dict[Any, int] = {}  # ip_flows entry -> samples last reported
        self.observed = dict.fromkeys(self.settings, 0)
        self.emitted = dict.fromkeys(self.settings, 0)
        self.started = time.monotonic()

    @property
    def active(self) -> bool:
        return bool(self.settings)

    def observe(
        self, counter_records: Iterable[KernelRecord], drop_events: int = 0, lifetimes: tuple[int, int] = (0, 0),
        open_s: float = 0.0,
    ) -> None:  # fmt: skip
        """Fold one poll's counter records (and the drop events it read, the buffer
        lifetimes (seen, followed) the kernel counted since the last poll and, with
        --skb-window, the time its windows were open since) into the window."""
        self.open_s += open_s
        if "skb_drop" in self.settings:
            self.emitted["skb_drop"] += drop_events
        if "skb_event" in self.settings:
            self.observed["skb_event"] += lifetimes[0]
            self.emitted["skb_event"] += lifetimes[1]
        for rec in counter_records:
            kind = _get(rec, "kind")
            if kind == "flow_counters" and "siftr_sample" in self.settings and _get(rec, "proto") == "tcp":
                self._flow(rec)
            elif kind == "ip_flow_counters" and "ip_packet" in self.settings:
                self._ip(rec)
            elif kind == "drop_count" and "skb_drop" in self.settings:
                self.observed["skb_drop"] += int(_get(rec, "delta"))

    def _flow(self, rec: Any) -> None:
        key = (_get(rec, "conn_uuid"), _get(rec, "sock_cookie"))
        skbs = _get(rec, "skbs")  # None before the kernel counted buffers: packets were per buffer then
        packets = int(skbs) if skbs is not None else int(_get(rec, "packets_in")) + int(_get(rec, "packets_out"))
        samples = int(_get(rec, "samples"))
        before = self.flows.get(key, (0, 0))
        self.observed["siftr_sample"] += max(0, packets - before[0])
        self.emitted["siftr_sample"] += max(0, samples - before[1])
        self.flows[key] = (packets, samples)
        if len(self.flows) > MAX_FLOWS:
            for old in list(self.flows)[: MAX_FLOWS // 2]:
                del self.flows[old]

    def _ip(self, rec: Any) -> None:
        names = ("netns", "if_index", "direction", "protocol", "src", "sport", "dst", "dport", "start_ts_ns")
        key = tuple(_get(rec, n) for n in names)
        samples = int(_get(rec, "samples"))
        self.observed["ip_packet"] += int(_get(rec, "packets_delta"))
        self.emitted["ip_packet"] += max(0, samples - self.ip_entries.get(key, 0))
        self.ip_entries[key] = samples
        if len(self.ip_entries) > MAX_FLOWS:
            for old in list(self.ip_entries)[: MAX_FLOWS // 2]:
                del self.ip_entries[old]

    def records(self, env: KernelEnv) -> list[KernelRecord]:
        """The window's reports (types whose kernel count moved, and skb_event whenever
        skb-lifecycle's windows were open); starts the next window."""
        now = time.monotonic()
        window = now - self.started
        out: list[KernelRecord] = []
        for event_type, setting in self.settings.items():
            observed, emitted = self.observed[event_type], self.emitted[event_type]
            windowed = self.windowed and event_type == "skb_event"
            if observed <= 0 and not (windowed and self.open_s > 0):  # windows open and nothing seen: said too
                continue
            out.append(
                SamplingReport(
                    **collector_envelope(env, "sampling", "collector/sampling"),
                    event_type=event_type,
                    setting=setting,
                    window_s=round(window, 6),
                    observed=observed,
                    emitted=emitted,
                    ratio=round(observed / emitted, 4) if emitted else None,
                    open_s=round(self.open_s, 6) if windowed else None,
                )  # fmt: skip
            )
        self.open_s = 0.0
        self.observed = dict.fromkeys(self.settings, 0)
        self.emitted = dict.fromkeys(self.settings, 0)
        self.started = now
        return out

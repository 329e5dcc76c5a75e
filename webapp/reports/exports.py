"""Stored records as SIFTR logs and pcap files, streamed from the database.

SIFTR: a connection's or host's siftr_sample rows in wall-clock order, written by
translators.siftr_log; LossReport rows of provider ``siftr`` whose event type is a
skip counter of the chosen version (as `nettrail analyze FILE.siftr` stores them)
fill the footer's skip counters, so an import and re-export keeps them.
pcap: packet records that kept their frame bytes, merged in capture order.
Both raise ExportUnavailable before writing anything when there is nothing to export.
Keep in sync with: translators/siftr_log.py, analysis/export/pcap.py,
analysis/capture/siftr.py (the loss event names), docs/reports.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO, TextIO

from django.db.models import Sum

from analysis.export.filters import ReportFilter
from analysis.export.pcap import PACKET_KINDS, PcapWriter, capture_order
from translators.records import SiftrSample
from translators.siftr_log import SiftrLogWriter, family, skip_counter_names
from webapp.reports.render import CHUNK, as_records, scoped
from webapp.traces.models import KIND_MODELS

SIFTR_VERSIONS = ("1.2.3", "1.3.0", "2.0", "2.2")
POLL = "poll"  # SiftrSample.direction of siftr-poll's samples: not packets, not in a SIFTR log


class ExportUnavailable(LookupError):
    """Nothing to export (no samples, no frame bytes): HTTP 409, CLI exit 1."""


def siftr_samples(f: ReportFilter, version: str) -> Iterator[SiftrSample]:
    qs = scoped("siftr_sample", f).exclude(direction=POLL)
    if family(version) == "2":
        qs = qs.filter(ip_ver=4)  # SIFTR2 logs are IPv4 only (providers.md 6.5)
    for rec in as_records(qs.order_by("ts_wall", "seq"), "siftr_sample"):
        assert isinstance(rec, SiftrSample)
        yield rec


def siftr_skips(f: ReportFilter) -> dict[str, int]:
    qs = KIND_MODELS["loss_report"].objects.filter(provider="siftr")
    if f.hosts:
        qs = qs.filter(host_id__in=f.hosts)
    rows = qs.values_list("event_type").annotate(lost=Sum("lost")).order_by()
    return {f"num_{event}": int(lost) for event, lost in rows if "skipped_pkts_" in event}


def siftr_steps(out: TextIO, f: ReportFilter, version: str = "1.3.0") -> Iterator[None]:
    """Writes the log, yielding after each line; ExportUnavailable when there is no sample."""
    samples = scoped("siftr_sample", f)
    first = samples.exclude(direction=POLL).order_by("ts_wall").values_list("ts_wall", flat=True).first()
    if first is None:
        if samples.exists():  # siftr-poll's samples only: each line of a SIFTR log is a packet
            raise ExportUnavailable(
                "no SIFTR samples of packets in scope: those here were polled (siftr-poll), one per socket per "
                "interval with no packet behind it; a SIFTR log needs the per-packet siftr provider"
            )
        raise ExportUnavailable("no SIFTR samples in scope")
    writer = SiftrLogWriter(out, version=version, enable_time=f.since if f.since is not None else first)
    for sample in siftr_samples(f, version):
        writer.write(sample)
        yield None
    names = skip_counter_names(version)
    skipped = {k: v for k, v in siftr_skips(f).items() if k in names} if f.connection is None else {}
    writer.close(f.until, skipped)
    yield None


def pcap_steps(out: BinaryIO, f: ReportFilter) -> Iterator[None]:
    """Writes the pcap, yielding after each frame; ExportUnavailable when no frame has bytes."""
    querysets = [scoped(kind, f).filter(frame_bytes__isnull=False) for kind in PACKET_KINDS]
    if not any(qs.exists() for qs in querysets):
        raise ExportUnavailable("no packet record with frame bytes in scope (import captures with --keep-bytes)")
    streams = [
        as_records(qs.order_by("ts_ns", "frame"), kind, CHUNK, omit=frozenset())
        for kind, qs in zip(PACKET_KINDS, querysets, strict=True)
    ]
    writer = PcapWriter(out)
    for rec in capture_order(*streams):
        writer.write(rec)
        yield None
    writer.close()

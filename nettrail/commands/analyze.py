"""`nettrail analyze FILE`: a pcap/pcapng capture -> connections, TCP analysis flags, alerts (xo output).

Output contract (docs/analyze.md): top container `analyze` with `file`, `format`,
`host_id`, `boot_id`; with --packets a `packet` list (ip_packet, tcp_segment,
udp_datagram records in file order); a `connection` list (translators.records.Connection,
one per TCP/UDP flow, each with an `analysis` container); a `totals` container; an
`alert` list (P1-P6, then the kernel-agnostic rules K9/K14 of
analysis/alerts/capture_rules.py). Field names keep their underscores in every style.

Errors: a file that cannot be read as a capture at all prints one line naming the file
and the byte offset and exits 1. Damaged packets are skipped and counted
(totals.packets_malformed); their first offsets are printed as warnings with
`--libxo warn`.

Start-up time (issue 17 item 7): the alert rules (and their TOML defaults), the SIFTR
reader, the Zeek writer, the store/send path and, for a small capture, numpy are
imported only when used; tests/test_analyze_startup.py checks which modules a plain run
loads.

Keep in sync with: docs/analyze.md, analysis/flows/capture_flows.py (Totals).
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from analysis.capture.decoding import decoded_batches, is_small
from analysis.capture.file_records import capture_id
from analysis.capture.pcap import CaptureError, CaptureReader, Damage
from analysis.flows.capture_flows import CapturePipeline, Totals
from nettrail.commands import analyze_store as store
from translators.records import Record
from xo import Writer, add_libxo_argument, libxo_from_args

if TYPE_CHECKING:
    from analysis.alerts.capture_rules import CaptureRules

PROGRESS_MIN_BYTES = 4 << 20
# The first bytes of the containers CaptureReader reads (pcap both orders, usec and nsec; pcapng; gzip).
CAPTURE_MAGICS = (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d",
                  b"\x0a\x0d\x0d\x0a", b"\x1f\x8b")  # fmt: skip
# Labels (translators/linklayers.py) of non-IP traffic every LAN carries: counted, not warned about.
EXPECTED_NON_IP = (
    "ethertype 0x0806", "ethertype 0x88cc", "ethertype 0x888e", "ethertype 0x8863", "802.2 LLC without SNAP",
    "802.11 management/control", "802.11 null data", "PPP protocol 0xc021", "PPP protocol 0x8021",
    "PPP protocol 0x8057",
)  # fmt: skip

TOTAL_FIELDS = (
    ("packets", "Packets"),
    ("bytes_captured", "Bytes captured"),
    ("bytes_wire", "Bytes on the wire"),
    ("packets_tcp", "TCP packets"),
    ("packets_udp", "UDP packets"),
    ("packets_icmp", "ICMP packets"),
    ("packets_other_ip", "Other IP packets (incl. non-first fragments)"),
    ("packets_non_ip", "Non-IP packets"),
    ("packets_malformed", "Malformed packets (skipped)"),
    ("records_damaged", "Damaged file records (skipped)"),
    ("packets_dropped", "Packets dropped by the kernel (live capture)"),
    ("fragments", "IP fragments"),
    ("icmp_unreachable", "ICMP unreachable messages"),
    ("connections_tcp", "TCP connections"),
    ("connections_udp", "UDP flows"),
)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "analyze",
        help="analyse a pcap/pcapng capture: connections, Wireshark-style TCP analysis, alerts",
        description="Analyse a pcap or pcapng file (optionally gzip-compressed) like a live host: "
        "connection summaries with Zeek conn_state/history, tcp.analysis flag counts, pcap alerts P1-P6.",
    )
    p.add_argument("file", metavar="FILE", help="capture file (pcap, pcapng, .gz)")
    p.add_argument("--packets", action="store_true", help="also emit one record per packet, with its analysis flags")
    p.add_argument(
        "--wireshark",
        choices=("upstream", "4.0"),
        default="upstream",
        help="tcp.analysis semantics: current upstream Wireshark (default, anomalies.md) or Wireshark 4.0 "
        "(Debian 12's tshark) for cross-checking against that version",
    )
    p.add_argument(
        "--rules",
        default=None,
        help="rules TOML file for the kernel-agnostic alert rules (K9, K14; default $NETTRAIL_RULES or none)",
    )
    p.add_argument("--zeek", action="store_true", help="write Zeek's conn.log (TSV) instead of the xo document")
    add_libxo_argument(p)
    store.add_arguments(p)  # --store / --server URL --token T
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    options = libxo_from_args(args)
    path: str = args.file
    if args.zeek and (args.packets or args.libxo is not None):
        print("nettrail: analyze: --zeek writes conn.log only: it takes no --packets or --libxo", file=sys.stderr)
        return 2
    if maybe_siftr(path):  # a siftr(4) log: starts with enable_time_secs= (issue 9)
        from analysis.capture.siftr import analyze_siftr

        if args.zeek:
            print(f"nettrail: analyze: {path}: a SIFTR log has no connection summaries for conn.log", file=sys.stderr)
            return 2
        return analyze_siftr(args, store.store_passing if getattr(args, "store", False) else None)
    from analysis.alerts.capture_rules import CaptureRules

    rules = CaptureRules()
    if args.rules is not None or os.environ.get("NETTRAIL_RULES"):  # a user's file: its errors before any work
        from analysis.alerts.config import ConfigError, load_config

        try:
            rules = CaptureRules(load_config(args.rules))
        except ConfigError as exc:
            print(f"nettrail: analyze: {exc}", file=sys.stderr)
            return 2
    try:
        reader = CaptureReader(path)
    except CaptureError as exc:
        print(f"nettrail: analyze: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"nettrail: analyze: {path}: byte offset 0: {exc.strerror or exc}", file=sys.stderr)
        return 1
    # The capture id (sha256 of the file) is hashed by a thread while the analysis runs:
    # hashlib and file reads release the GIL, and nothing is printed before it is needed.
    hashing = CaptureIdThread(path)
    pipeline = CapturePipeline(os.path.basename(path), "", packets=args.packets, compat=args.wireshark)
    writer = Writer(io.StringIO() if args.zeek else sys.stdout, options)
    with reader:
        if args.zeek:  # conn.log instead of the xo document (xo/zeek.py)
            try:
                consume(reader, pipeline, writer, False)
            except CaptureError as exc:
                print(f"nettrail: analyze: {exc}", file=sys.stderr)
                return 1
            pipeline.boot_id = hashing.result()
            from xo.zeek import write_conn_log

            write_conn_log(sys.stdout, pipeline.connections(), pipeline.totals.first_ts, pipeline.totals.last_ts)
            warn_undecoded(writer, path, pipeline.totals)
            return store.ship(args) if store.wanted(args) else 0
        writer.open_container("analyze")
        if args.packets:  # packet records stream out as they come and carry the id
            write_header(writer, reader, pipeline, hashing.result())
        try:
            damage = consume(reader, pipeline, writer, args.packets, rules)
        except CaptureError as exc:
            writer.finish()
            print(f"nettrail: analyze: {exc}", file=sys.stderr)
            return 1
        if not args.packets:
            write_header(writer, reader, pipeline, hashing.result())
        write_results(writer, pipeline, damage, reader.path, rules)
    writer.finish()
    return store.ship(args) if store.wanted(args) else 0


def maybe_siftr(path: str) -> bool:
    """A SIFTR log rather than a capture? Captures are told by their magic number without
    importing the SIFTR reader; anything else asks it."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        return False  # CaptureReader reports the error
    if head.startswith(CAPTURE_MAGICS):
        return False
    from analysis.capture.siftr import looks_like_siftr

    return looks_like_siftr(path)


class CaptureIdThread(threading.Thread):
    """Computes capture_id(path) in the background; result() waits for it."""

    def __init__(self, path: str) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.value = ""
        self.error: OSError | None = None
        self.start()

    def run(self) -> None:
        try:
            self.value = capture_id(self.path)
        except OSError as exc:
            self.error = exc

    def result(self) -> str:
        self.join()
        if self.error is not None:
            raise self.error
        return self.value


def write_header(writer: Writer, reader: CaptureReader, pipeline: CapturePipeline, boot_id: str) -> None:
    """The leading leaves of the `analyze` container; sets the pipeline's capture id."""
    pipeline.boot_id = boot_id
    writer.emit(
        "{Lwc:File}{:file/%s}\n{Lwc:Format}{:format/%s}\n",
        file=reader.path,
        format=reader.format + (".gz" if reader.compressed else ""),
    )
    writer.emit("{Lwc:Host}{:host_id/%s}\n{Lwc:Capture id}{:boot_id/%s}\n", host_id=pipeline.host_id, boot_id=boot_id)


def consume(
    reader: CaptureReader, pipeline: CapturePipeline, writer: Writer, packets: bool, rules: CaptureRules | None = None
) -> Damage:
    """Stream every batch through the pipeline; -> the reader's damage record.

    With --packets the records are written as they come, from this process, and pass
    through the alert rules on the way (SYN floods need the SYNs). Without, a
    child process reads and decodes (analysis/capture/pcap_worker.py) while this one
    analyses, so a file keeps two cores busy; a small file is decoded here, in plain
    Python (analysis/capture/decoding.py): forking the worker, or importing numpy, would
    cost more than it saves."""
    if not packets and is_small(reader):
        with progress(reader, reader.progress) as tick:
            for decoded, _batch in decoded_batches(reader, want_options=False):
                for _ in pipeline.feed(decoded):
                    pass
                tick()
        return reader.damage
    if not packets:
        from analysis.capture.pcap_worker import DecodedStream

        # The cycle collector's passes cost 5-10 % of a big file's analysis CPU (the unacked
        # segments and events it keeps are all tracked) and find next to nothing: what is
        # loaded now lives as long as the process (frozen), and young collections wait for
        # 50,000 new objects instead of 700 (docs/benchmarks.md, lossy traffic).
        gc.freeze()
        gc.set_threshold(50_000, 20, 20)

        with DecodedStream(reader.path, reader.chunk_size) as stream, progress(reader, stream.progress) as tick:
            for decoded in stream:
                for _ in pipeline.feed(decoded):
                    pass
                tick()
            return stream.damage
    if rules is None:
        from analysis.alerts.capture_rules import CaptureRules

        rules = CaptureRules()
    with progress(reader, reader.progress) as tick:

        def records() -> Iterator[Record]:
            for decoded, _batch in decoded_batches(reader, want_options=True):
                yield from pipeline.feed(decoded)
                tick()

        opened = False
        for rec in rules.packets(records()):
            if not opened:
                writer.open_list("packet")
                opened = True
            writer.record(rec, name="packet")
        if opened:
            writer.close_list("packet")
    return reader.damage


def write_results(
    writer: Writer, pipeline: CapturePipeline, damage: Damage | None, source: str, rules: CaptureRules | None = None
) -> None:
    """The connection list, totals and alerts (P1-P6, then the kernel-agnostic K rules:
    the packets' alerts are in ``rules`` already, a fresh one has none); with `--libxo
    warn` the first damaged offsets on stderr."""
    if rules is None:
        from analysis.alerts.capture_rules import CaptureRules

        rules = CaptureRules()
    connections = pipeline.connections()
    rules.connections(connections)
    alerts = pipeline.alerts() + rules.alerts()
    totals = pipeline.totals
    totals.records_damaged = damage.count if damage is not None else 0
    writer.open_list("connection")  # always present, empty in JSON when there is no flow
    for conn in connections:
        writer.record(conn, name="connection")
    writer.close_list("connection")
    write_totals(writer, totals)
    writer.open_list("alert")
    for alert in alerts:
        writer.record(alert, name="alert")
    writer.close_list("alert")
    warn_undecoded(writer, source, totals)
    if writer.options.warn:
        for offset, reason in damage.first if damage is not None else ():
            writer.warn(f"{source}: byte offset {offset}: {reason}")
        for line in totals.warnings:
            writer.warn(f"{source}: {line}")


def write_totals(writer: Writer, totals: Totals) -> None:
    writer.open_container("totals")
    for name, label in TOTAL_FIELDS:
        writer.emit(f"{{Lwc:{label}}}{{:{name}/%u}}\n", **{name: getattr(totals, name)})
    if totals.first_ts is not None and totals.last_ts is not None:
        writer.emit(
            "{Lwc:First packet}{:first_ts/%.6f}\n{Lwc:Last packet}{:last_ts/%.6f}\n",
            first_ts=totals.first_ts,
            last_ts=totals.last_ts,
        )
    writer.open_list("undecoded")  # always present: packets not decoded, by link type / ethertype
    for what, count in sorted(totals.undecoded.items()):
        writer.open_instance("undecoded")
        writer.emit("{Lwc:Not decoded}{k:what/%s}{D:: }{:packets/%u}\n", what=what, packets=count)
        writer.close_instance("undecoded")
    writer.close_list("undecoded")
    writer.close_container("totals")


def warn_undecoded(writer: Writer, source: str, totals: Totals) -> None:
    """Packets that could not be decoded, on stderr whatever --libxo says: a capture of an
    unsupported link layer must not look like a quiet one. Known non-IP traffic (ARP, LLDP,
    spanning tree, 802.11 management, ...) is only counted, unless nothing else was IP."""
    if not totals.undecoded:
        return
    shown = {w: n for w, n in totals.undecoded.items() if not w.startswith(EXPECTED_NON_IP)}
    if not shown and totals.packets > totals.packets_non_ip:
        return
    items = sorted((shown or totals.undecoded).items(), key=lambda kv: (-kv[1], kv[0]))
    listed = ", ".join(f"{n} {what}" for what, n in items)
    writer.warn(f"{source}: {sum(n for _, n in items)} packets not decoded: {listed}")


@contextmanager
def progress(reader: CaptureReader, position: Callable[[], int]) -> Iterator[Callable[[], None]]:
    """A rich progress bar on stderr for big files when stderr is a terminal; otherwise nothing."""
    if reader.size < PROGRESS_MIN_BYTES or not sys.stderr.isatty():
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description}", BarColumn(), DownloadColumn(), TimeRemainingColumn(),
        console=Console(file=sys.stderr), transient=True,
    ) as bar:  # fmt: skip
        task = bar.add_task(os.path.basename(reader.path), total=reader.size)
        yield lambda: bar.update(task, completed=position())

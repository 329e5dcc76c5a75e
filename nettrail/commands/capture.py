"""`nettrail capture -i IFACE [--duration S] [-w FILE]`: live packets through the `analyze` pipeline.

Frames come from scapy's AF_PACKET socket (collector/sources/live.py), go through the
same decoder, TCP analysis, connection summaries and P-rules as capture files, and are
printed with the same output contract as `nettrail analyze` (docs/analyze.md), in a
top container named `capture`. SIGINT/SIGTERM end the capture early and still print the
results. `-w FILE` also writes the frames to a pcap file (nanosecond timestamps).

Keep in sync with: nettrail/commands/analyze.py (write_results), docs/analyze.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any, BinaryIO

from analysis.flows.capture_flows import CapturePipeline
from collector.sources.live import CaptureUnavailable, LiveCapture
from nettrail.commands.analyze import write_results
from translators.packet import decode_batch
from xo import Writer, add_libxo_argument, libxo_from_args


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "capture",
        help="capture live packets on an interface and analyse them like `nettrail analyze`",
        description="Capture packets on IFACE (AF_PACKET, needs CAP_NET_RAW) and print connections, "
        "tcp.analysis counts and alerts when the capture ends (after --duration, or on Ctrl-C).",
    )
    p.add_argument("-i", "--interface", required=True, metavar="IFACE", help="interface to capture on, e.g. lo or eth0")
    p.add_argument(
        "--duration", type=float, default=None, metavar="S", help="stop after S seconds (default: until interrupted)"
    )
    p.add_argument("-w", "--write", metavar="FILE", help="also write the captured frames to FILE (pcap)")
    p.add_argument("--packets", action="store_true", help="also emit one record per packet")
    p.add_argument(
        "-f", "--filter", metavar="EXPR", help="capture only packets matching this BPF filter (tcpdump syntax)"
    )
    p.add_argument(
        "--wireshark", choices=("upstream", "4.0"), default="upstream", help="tcp.analysis semantics (see analyze)"
    )
    add_libxo_argument(p)
    p.set_defaults(func=run)


def host_identity() -> tuple[str, str]:
    """(host_id, boot_id) of this machine, as every live source reports them."""
    host = os.environ.get("NETTRAIL_HOST_ID") or socket.gethostname()
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = "unknown"
    return host, boot


def run(args: argparse.Namespace) -> int:
    options = libxo_from_args(args)
    if args.duration is not None and args.duration <= 0:
        print("nettrail: capture: --duration must be positive", file=sys.stderr)
        return 2
    out: BinaryIO | None = None
    try:
        if args.write:
            out = open(args.write, "wb")  # noqa: SIM115 - closed below
        capture = LiveCapture(args.interface, write=out, bpf=args.filter)
    except CaptureUnavailable as exc:
        print(f"nettrail: capture: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"nettrail: capture: {args.write}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    # like tcpdump: say when packets are being captured (stderr, so structured output stays clean)
    print(
        f"nettrail: capture: listening on {args.interface}, link type {capture.linktype}", file=sys.stderr, flush=True
    )
    host, boot = host_identity()
    pipeline = CapturePipeline(
        host, boot, packets=args.packets, hook=f"capture/{args.interface}", compat=args.wireshark
    )
    writer = Writer(sys.stdout, options)
    previous = {sig: signal.signal(sig, lambda *_: capture.stop()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        writer.open_container("capture")
        writer.emit("{Lwc:Interface}{:interface/%s}\n{Lwc:Host}{:host_id/%s}\n", interface=args.interface, host_id=host)
        opened = False
        for batch in capture.batches(args.duration):
            for rec in pipeline.feed(decode_batch(batch, want_options=args.packets)):
                if not opened:
                    writer.open_list("packet")
                    opened = True
                writer.record(rec, name="packet")
        if opened:
            writer.close_list("packet")
        pipeline.totals.packets_dropped = capture.kernel_drops()
        if pipeline.totals.packets_dropped:
            writer.warn(
                f"{args.interface}: the kernel dropped {pipeline.totals.packets_dropped} packets before they were read"
            )
        write_results(writer, pipeline, None, args.interface)
        writer.finish()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        capture.close()
        if out is not None:
            out.close()
    return 0

"""Scaffolding shared by the kernel alert tests (tests/test_alerts_kernel*.py): the
skip marks, a network namespace with an nftables table (created and deleted by name,
only what the test made), a namespace's TcpExt counters, stopping a collector, and
reading alerts back (the last version of each).

Keep in sync with tests/collect_process.py (the collector child process).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import pytest

from tests.collect_process import Collector
from tests.kernel_support import bpf_skip_reason
from translators.records import Alert, Record

KERNEL_ALERTS = [
    pytest.mark.kernel,
    pytest.mark.slow,
    pytest.mark.skipif(bpf_skip_reason() is not None, reason=f"kernel alert tests: {bpf_skip_reason()}"),
]


@contextmanager
def namespace(name: str, nft_table: str | None = None, table_name: str | None = None) -> Iterator[tuple[str, int]]:
    """A new network namespace with lo up and, if given, an nftables table loaded into it:
    yields (name, inode). The table (`inet <table_name>`) and the namespace are deleted after."""
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        if nft_table is not None:
            subprocess.run(["ip", "netns", "exec", name, "nft", "-f", "-"], input=nft_table, text=True, check=True)
        yield name, os.stat(f"/run/netns/{name}").st_ino
    finally:
        if table_name is not None:
            subprocess.run(["ip", "netns", "exec", name, "nft", "delete", "table", "inet", table_name], check=False)
        subprocess.run(["ip", "netns", "del", name], check=False)


def nft_list(ns: str, table_name: str) -> str:
    """The table with its counters (printed by fixtures: shown when a test fails)."""
    return subprocess.run(
        ["ip", "netns", "exec", ns, "nft", "list", "table", "inet", table_name], capture_output=True, text=True
    ).stdout


def netstat(ns: str, name: str) -> int:
    """A TcpExt counter of the namespace (only the test's own traffic lives there)."""
    text = subprocess.run(
        ["ip", "netns", "exec", ns, "cat", "/proc/net/netstat"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    names, values = text[0].split(), text[1].split()
    return int(values[names.index(name)])


def wait_for_closes(ns: str, timeout: float = 20) -> str:
    """Wait until no TCP socket of the namespace is still closing (FIN_WAIT_1/2, CLOSING,
    LAST_ACK): on a loaded machine a close handshake may outlast a fixed pause. -> what `ss`
    still lists at the timeout ('' once all are done), for the failure output."""
    cmd = ["ip", "netns", "exec", ns, "ss", "-Htan", "state", "fin-wait-1", "state", "fin-wait-2"]
    cmd += ["state", "closing", "state", "last-ack"]
    deadline = time.monotonic() + timeout
    while True:
        left = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=10).stdout.strip()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def stop(col: Collector, timeout: float = 120) -> tuple[int, bytes, str]:
    """Stop a collector; never leave a tracer running behind a failed test."""
    try:
        return col.stop(timeout=timeout)
    except subprocess.TimeoutExpired:
        col.proc.kill()
        col.proc.wait()
        raise


def final(alerts: Iterable[Alert]) -> list[Alert]:
    """The last emitted version of every alert, in order of first emission."""
    last: dict[str, Alert] = {}
    for a in alerts:
        last[a.alert_id or ""] = a
    return list(last.values())


def split_alerts(records: list[Record]) -> tuple[list[Record], list[Alert]]:
    """A collector's --alerts output: (the other records, the final version of each alert)."""
    return [r for r in records if not isinstance(r, Alert)], final(r for r in records if isinstance(r, Alert))


def pick(alerts: list[Alert], rule: str, cond: str, **fields: object) -> list[Alert]:
    return [
        a
        for a in alerts
        if a.rule_id == rule and a.condition == cond and all(getattr(a, k) == v for k, v in fields.items())
    ]

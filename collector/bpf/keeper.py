"""Count the events a killed collector left unread in its kernel ring.

The ring buffer lives as long as a file descriptor of it: a collector killed outright
(SIGKILL, the OOM killer) takes its ring, and the events it had not read yet, with it,
uncounted. So while a session runs, a small keeper process holds a duplicate of the ring's
descriptor and a pipe from the collector. The pipe closes when the collector ends, however
it ends. A collector that ended normally drained its ring first (poll_batches' final
read), so the keeper finds nothing; one that was killed left events there, and the keeper
counts them (after the collector's programs went with it: no run writes any more), writes
the count beside the HTTP sink's spool and exits. The next sink on that spool claims the
count (claim_unread) as records lost, with the pending records of the killed sink's own
ledger (collector/sinks/held.py).

    <spool>/ring-<collector pid>.keeper   the keeper's pid while it waits or counts
    <spool>/ring-<collector pid>.unread   {"pid", "unread", "by_type"}, only if unread > 0

Events the killed collector had read but not yet handed to its sink are still uncounted
(a batch between the ring and the sink's write, a fraction of a second). Keep in sync with
collector/bpf/ringbuf.py (the reader it reuses) and nettrail/commands/collect.py.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

log = logging.getLogger("nettrail.keeper")

SETTLE_S = 0.2  # after the collector is gone, until its programs' last runs have ended
GONE_TIMEOUT_S = 30.0
DRAINED = b"drained"  # the collector's word before it closes the pipe after a final read


def keeper_path(spool: Path, pid: int, suffix: str) -> Path:
    return spool / f"ring-{pid}.{suffix}"


class RingKeeper:
    """The collector's side: start() a keeper for a session's ring; close() once the ring was
    drained (a swap's old session: nothing is left to count)."""

    def __init__(self, proc: subprocess.Popen[bytes], pipe_w: int) -> None:
        self.proc = proc
        self.pipe_w = pipe_w

    @classmethod
    def start(cls, ring_fd: int, ring_bytes: int, record_size: int, spool: Path) -> RingKeeper:
        pipe_r, pipe_w = os.pipe()
        os.set_inheritable(pipe_w, False)
        cmd = [sys.executable, "-m", "collector.bpf.keeper", str(ring_fd), str(ring_bytes), str(record_size)]
        cmd += [str(pipe_r), str(os.getpid()), str(spool)]
        root = Path(__file__).resolve().parents[2]
        path = [str(root), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
        proc = subprocess.Popen(  # its own session: a terminal's Ctrl-C is the collector's to handle
            cmd, pass_fds=(ring_fd, pipe_r), start_new_session=True, env=env, stdin=subprocess.DEVNULL
        )
        os.close(pipe_r)
        return cls(proc, pipe_w)

    def close(self, timeout: float = 10.0) -> None:
        """The session's ring was drained (its final read after the detach)."""
        os.write(self.pipe_w, DRAINED)
        os.close(self.pipe_w)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def count_unread(ring_fd: int, ring_bytes: int, record_size: int) -> Counter[str]:
    """The committed events between the ring's consumer and producer positions, by kind."""
    from collector.bpf import layout
    from collector.bpf.ringbuf import RingReader

    reader = RingReader(ring_fd, ring_bytes, record_size)
    counts: Counter[str] = Counter()
    try:
        while True:
            raw = reader.read()
            if not raw.size:
                return counts
            for t, n in Counter(raw.view(layout.EVENT_DTYPE)["type"].tolist()).items():
                counts[layout.EVENT_NAMES.get(t, f"type {t}")] += n
    finally:
        reader.close()


def alive(pid: int) -> bool:
    """The process exists and has not exited (a zombie has closed every descriptor)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    state = next((ln for ln in text.splitlines() if ln.startswith("State:")), "")
    return "zombie" not in state and "dead" not in state


def claim_unread(spool: Path, wait_s: float = 5.0) -> list[tuple[int, int]]:
    """(collector pid, events) the keepers of killed collectors found unread, removed once
    read. A keeper still counting for a collector that is gone is waited for, up to wait_s
    (a collector restarted at once would otherwise miss its count)."""
    deadline = time.monotonic() + wait_s
    while any(_counting(mark) for mark in spool.glob("ring-*.keeper")) and time.monotonic() < deadline:
        time.sleep(0.02)
    found = []
    for path in sorted(spool.glob("ring-*.unread")):
        try:
            data = json.loads(path.read_text())
            found.append((int(data["pid"]), int(data["unread"])))
        except (OSError, ValueError, KeyError, TypeError):
            log.error("unreadable ring count %s: what its killed collector left unread is unknown", path)
        path.unlink(missing_ok=True)
    return found


def _counting(mark: Path) -> bool:
    """A keeper whose collector is gone and which is itself still running."""
    try:
        collector, keeper = int(mark.stem.removeprefix("ring-")), int(mark.read_text())
    except (OSError, ValueError):
        return False
    return not alive(collector) and alive(keeper)


def main(argv: list[str]) -> int:
    ring_fd, ring_bytes, record_size, pipe_r, collector = (int(a) for a in argv[:5])
    spool = Path(argv[5])
    mark = keeper_path(spool, collector, "keeper")
    mark.write_text(str(os.getpid()))
    try:
        said = b""
        while chunk := os.read(pipe_r, 64):  # EOF: the collector closed it, or ended
            said += chunk
        if said == DRAINED:
            return 0  # closed after its ring's final read: nothing can be left in it
        deadline = time.monotonic() + GONE_TIMEOUT_S
        while alive(collector) and time.monotonic() < deadline:
            time.sleep(0.01)  # its programs go with its last file descriptors
        time.sleep(SETTLE_S)
        counts = count_unread(ring_fd, ring_bytes, record_size)
        unread = sum(counts.values())
        if unread:
            out = keeper_path(spool, collector, "unread")
            tmp = out.with_suffix(".tmp")
            tmp.write_text(json.dumps({"pid": collector, "unread": unread, "by_type": dict(counts)}))
            os.replace(tmp, out)
    finally:
        mark.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

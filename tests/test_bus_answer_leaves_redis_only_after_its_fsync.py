"""An XADD of the ingest tier is answered only after Redis fsynced it: a power loss cannot take an answered batch.

A SIGKILL leaves what Redis wrote in the kernel's page cache, so a kill test alone
cannot show what a power loss would do. This test reads the order of Redis's own
system calls instead (strace attached to a real redis-server by PID, the setting
docs/scale-out.md requires: ``appendfsync always``): the AOF write holding the
batch's XADD, then ``fdatasync`` of that file returning, and only then the reply
carrying the entry id to the client. With ``everysec`` the fdatasync runs later in a
background thread, after the reply (why such a Redis is refused).
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from django.test import override_settings
from redis_server import RedisServer
from webapp_cast import retransmit

from webapp.bus import streams


def ptrace_refused() -> bool:
    """Yama (ptrace_scope >= 1) lets a non-root strace attach only to its own descendants; Redis is its sibling."""
    scope = Path("/proc/sys/kernel/yama/ptrace_scope")
    return os.geteuid() != 0 and scope.exists() and int(scope.read_text()) >= 1


pytestmark = [
    pytest.mark.django_db,  # on PostgreSQL the entry's COPY rows are formatted with the database's help
    pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace"),
    pytest.mark.skipif(ptrace_refused(), reason="strace may not attach to Redis (kernel.yama.ptrace_scope >= 1)"),
]
ATTACH_TIMEOUT = 60.0


def wait_attached(tracer: subprocess.Popen[str]) -> None:
    """Until strace says it holds Redis (one line: "Process N attached with M threads")."""
    assert tracer.stderr is not None
    deadline, said = time.monotonic() + ATTACH_TIMEOUT, ""
    while "attached" not in said:
        left = deadline - time.monotonic()
        assert left > 0 and tracer.poll() is None, f"strace did not attach: {said}"
        if select.select([tracer.stderr], [], [], left)[0]:
            said += tracer.stderr.readline()


def test_redis_fsyncs_the_batchs_xadd_before_it_sends_the_answer() -> None:
    server = RedisServer()  # appendonly yes, appendfsync always
    server.start()
    assert server.proc is not None
    work = Path(tempfile.mkdtemp(prefix="nettrail-strace-"))
    trace = work / "redis.strace"
    tracer = subprocess.Popen(
        ["strace", "-f", "-p", str(server.proc.pid), "-e", "trace=write,writev,fdatasync,fsync",
         "-s", "64", "-o", str(trace)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    streams.client.cache_clear()
    try:
        wait_attached(tracer)
        with override_settings(NETTRAIL_REDIS_URL=server.url):
            entry_id = streams.append("host-a", [retransmit("host-a", 1)])
        tracer.send_signal(signal.SIGINT)  # strace detaches and flushes its output; Redis goes on
        tracer.wait(timeout=30)
        lines = trace.read_text().splitlines()
    finally:
        if tracer.poll() is None:
            tracer.kill()
            tracer.wait(timeout=30)
        streams.client.cache_clear()
        server.close()
        shutil.rmtree(work, ignore_errors=True)

    (aof_write,) = [i for i, line in enumerate(lines) if re.search(r"write\(\d+, .*XADD.*nettrail:ingest", line)]
    aof_fd = re.search(r"write\((\d+),", lines[aof_write])
    assert aof_fd is not None
    synced = [i for i, line in enumerate(lines) if re.search(rf"fdatasync\({aof_fd[1]}\)\s+= 0", line)]
    # The reply: a write of the entry id to any descriptor but the AOF's (which holds the id too).
    reply = re.compile(r"write\((\d+), .*" + re.escape(entry_id))
    (answer,) = [i for i, line in enumerate(lines) if (m := reply.search(line)) and m[1] != aof_fd[1]]
    # The AOF write, then its fdatasync returned, then the answer: never the answer first.
    assert [i for i in synced if aof_write < i < answer], "\n".join(lines[aof_write : answer + 1])

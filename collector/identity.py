"""Host identity of live records: host_id and boot_id (the shared contract in the brief).

host_id is the host name unless NETTRAIL_HOST_ID is set; boot_id comes from
/proc/sys/kernel/random/boot_id. Keep in sync with nettrail/commands/up.py, which
names the host the same way when it makes the local ingest token.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def host_id() -> str:
    return os.environ.get("NETTRAIL_HOST_ID") or socket.gethostname()


def boot_id() -> str:
    try:
        return BOOT_ID_PATH.read_text().strip()
    except OSError:
        return "unknown-boot"

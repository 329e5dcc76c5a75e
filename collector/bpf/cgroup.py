"""The cgroup v2 hierarchy the UDP peer programs attach to (kmod/udp_peer.bpf.c).

cgroup sock_addr programs run for the processes of the cgroup they are attached to and
of its descendants, so attached at the root of the hierarchy this process sees they see
every process's UDP calls. The root is the cgroup2 mount whose mount root is "/" in
/proc/self/mountinfo (on a hybrid host, /sys/fs/cgroup/unified; on a unified one,
/sys/fs/cgroup); $NETTRAIL_CGROUP2 names another. None when there is none: the programs
are not attached and the collector says what that costs (loader.CGROUP_LOSES).
"""

from __future__ import annotations

import os
from pathlib import Path

CGROUP2_ENV = "NETTRAIL_CGROUP2"
MOUNTINFO = Path("/proc/self/mountinfo")


def root() -> Path | None:
    """The cgroup v2 hierarchy's root directory, or None."""
    chosen = os.environ.get(CGROUP2_ENV)
    if chosen:
        return Path(chosen) if Path(chosen).is_dir() else None
    try:
        lines = MOUNTINFO.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        # <id> <parent> <major:minor> <root> <mount point> <options> [optional...] - <type> <source> <super options>
        fields, _, tail = line.partition(" - ")
        parts = fields.split()
        if len(parts) >= 5 and tail.split()[:1] == ["cgroup2"] and parts[3] == "/":
            return Path(parts[4].replace("\\040", " "))
    return None

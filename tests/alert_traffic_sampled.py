"""Traffic for tests/test_alerts_sampled_kernel.py (K6/K7 on SIFTR samples thinned in the
kernel), run inside the test's network namespace as ``python -m tests.alert_traffic_sampled``.

One after the other, on 127.0.0.1 of the namespace, with the helpers of
tests/alert_traffic.py (their shapes are the ones tests/test_alerts_kernel.py proves at one
sample per packet): queueing behind a tc token bucket after a ping-pong baseline (K7, port
QUEUE_PORT), a bulk transfer through a 2 s nftables blackout (RTOs, cwnd back to one
segment: K6, port BLACKOUT_PORT; the set ``blackout`` of ``inet TABLE`` must exist), then a
clean bulk transfer (CLEAN_PORT). Keep the ports and the table in sync with the test.
Prints one JSON line of facts (pid, ports).
"""

from __future__ import annotations

import faulthandler
import json
import os

from tests.alert_traffic import blackout_bulk, bulk, queueing

TABLE = "ntsampled"
QUEUE_PORT = 7210
BLACKOUT_PORT = 7710
CLEAN_PORT = 7810
# RTOs on loopback come 0.2, 0.6 and 1.4 s into the blackout, the fourth at 3.0 s after it
# lifted: at a ppl up to 3 one of the first three is sampled, and the samples after the
# blackout (cwnd 1-2, Loss state) come at least 1.6 s later: K6's hold of 1 s, whatever
# the phase of the flow's packet counter.
BLACKOUT_S = 2.0


def main() -> None:
    faulthandler.dump_traceback_later(45, exit=True)  # a hard bound: print every stack and exit
    # alone: its token bucket slows all of lo. 3 s, not 2: a third of the segments are
    # sampled, and the highest sampled srtt must pass the 200 ms over baseline that makes
    # K7 critical (with lo's 64 KB segments one run peaked at 204 ms and stayed a warning)
    queueing(QUEUE_PORT, seconds=3.0)
    blackout_bulk(BLACKOUT_PORT, TABLE, length=BLACKOUT_S, seconds=3.5)
    received = bulk(CLEAN_PORT, 2.0)
    print(json.dumps({"pid": os.getpid(), "clean_bytes": received}))


if __name__ == "__main__":
    main()

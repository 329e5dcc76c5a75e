"""tcp --tcp-fold for the rules: a tcp_lifecycle is fed to them as the records the socket
streams without the fold (translators/tcp_lifecycle.py, expand()), in the order it streams
them, so every rule that reads tcp_state, tcp_cong_state, flow_counters or connection
(handshakes, K10 CLOSE_WAIT, the sampling report) sees a folded socket's transitions as a
streamed one's. Each part carries the lifecycle's seq (the record that brought it) and its
own time: a change's time in the kernel, not the lifecycle's arrival (docs/record-path.md,
step 2; tests/test_alerts_tcp_fold.py).
"""

from __future__ import annotations

from translators.records import Record, TcpLifecycle
from translators.tcp_lifecycle import expand


def parts(record: TcpLifecycle) -> list[Record]:
    out = expand(record)
    for part in out:
        part.seq = record.seq
    return out

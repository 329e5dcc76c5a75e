"""What a captured connection's Zeek conn_state says about its connect attempt.

Shared by the K9/K14 handshake rules (rules/handshakes.py) and by CaptureRules, which
skips the alert engine for a capture whose connections all succeeded: nothing it runs
on capture summaries can fire then, and `nettrail analyze` starts faster without it.
Keep in sync with: analysis/alerts/rules/handshakes.py, docs/alerts.md.
"""

from __future__ import annotations

from translators.records import Connection

# Zeek conn_state values of an attempt that never carried data (scan.zeek's notion).
FAILED_STATES = frozenset({"S0", "REJ", "RSTOS0", "RSTRH", "SH", "SHR"})
RESET_STATES = frozenset({"RSTO", "RSTR"})


def capture_outcome(rec: Connection) -> str | None:
    """success, refused or timeout for a wire connection summary (None: not TCP/unknown)."""
    if rec.source != "wire" or rec.proto != "tcp" or rec.conn_state is None:
        return None
    if rec.conn_state == "S0":
        return "timeout"
    if rec.conn_state in FAILED_STATES:
        return "refused"
    if rec.conn_state in RESET_STATES and not (rec.bytes_orig or rec.bytes_resp):
        return "reset"
    if rec.conn_state == "OTH":
        return None
    return "success"

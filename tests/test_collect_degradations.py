"""`nettrail collect` names what this kernel cannot give, each with its reason, in
collector_status.degraded and on stderr, and the set is the one pinned for this kernel:
an unexpected degradation (a fallback, a lost field) fails here instead of passing
because the loader declared it (issue 32).

The sets were measured inside the kernel matrix's guests (tests/kernel_matrix.py:
Debian 11's 5.10, Debian 12's 6.1 and 6.12) and on this machine's 6.18, which gives
everything; docs/collector.md's support table says the same in words.
"""

from __future__ import annotations

import json
import re

import pytest

from tests import kernel_expect
from tests.collect_process import Collector
from tests.kernel_support import kernel

pytestmark = kernel

PROVIDERS = "tcp,siftr-poll,tcpdebug,skb,udp-calls"
COOKIE = {(p, "sock_cookie") for p in PROVIDERS.split(",")}
# two runs: tcpdebug apart, since with --tcp-fold 6.1's verifier refuses tcp_destroy_sock
# (the compat object's fold and tcpdebug together: over its million instructions, 2026-12-08)
RUNS = [("tcp,siftr-poll,skb,udp-calls", ("--tcp-fold",)), ("tcpdebug", ())]
# (provider, field) each kernel cannot give with PROVIDERS and --tcp-fold; a kernel not
# listed (this machine's 6.18) gives all of it
DEGRADED: dict[tuple[int, int], set[tuple[str, str]]] = {
    (5, 10): {
        ("udp-calls", "udp_call"),  # from the system calls (5.10's udp_recvmsg has six parameters)
        ("tcp", "attribution"),  # at the exits of tcp_sendmsg/tcp_recvmsg (no sock_send_length before 6.3)
        ("tcpdebug", "tcp_debug.user"),  # SEND/RCVD there too
        ("tcp", "tcp_retransmit.err"),
        ("tcp", "tcp_reset.reason"),
        ("tcp", "tcp_reset.no_socket"),
        ("tcp", "tcp_cong_state"),
        ("tcp", "tcp_lifecycle"),  # --tcp-fold: no socket storage in tracing programs before 5.11
        ("skb", "skb_drop.drop_reason"),
        ("tcpdebug", "tcp_debug.drop"),
        *COOKIE,
    },
    (6, 1): {
        ("udp-calls", "udp_call"),  # from the UDP functions' exits
        ("tcp", "attribution"),  # at the exits of tcp_sendmsg/tcp_recvmsg (no sock_send_length before 6.3)
        ("tcpdebug", "tcp_debug.user"),  # SEND/RCVD there too
        ("tcp", "tcp_retransmit.err"),
        ("tcp", "tcp_reset.reason"),
        ("tcp", "tcp_reset.no_socket"),
        ("skb", "skb_drop.sock"),
        ("tcpdebug", "tcp_debug.drop_sock"),
    },
    (6, 12): {("tcp", "tcp_retransmit.err")},
}
LINE = re.compile(r"^nettrail collect: degraded: (\S+) (\S+): (.*)$")


@pytest.mark.matrix
@pytest.mark.parametrize(("providers", "extra"), RUNS)
def test_what_this_kernel_cannot_give_is_the_pinned_set_each_named_with_its_reason_in_the_status_and_on_stderr(
    providers: str, extra: tuple[str, ...]
) -> None:
    with Collector("--providers", providers, *extra, "--filter", "port=9", "--libxo", "json") as collector:
        collector.wait_attached()
        status, out, err = collector.stop()
    assert status == 0, err
    [rec] = json.loads(out)["nettrail"]["collector_status"]
    said = {(p, what): why for p, fields in rec["degraded"].items() for what, why in fields.items()}
    printed = {(m[1], m[2]): m[3] for m in map(LINE.match, err.splitlines()) if m}
    assert printed == said
    pinned = {d for d in DEGRADED.get(kernel_expect.RELEASE, set()) if d[0] in providers.split(",")}
    assert set(said) == pinned, sorted(said.items())
    assert all(why for why in said.values())
    if extra and not kernel_expect.FOLD:
        assert said["tcp", "tcp_lifecycle"] == kernel_expect.FOLD_OFF

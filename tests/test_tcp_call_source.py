"""Where TCP's send and receive calls are seen (collector/bpf/loader.py, tcp_call_source):
the plan for each kernel, what each source says it misses, the tcpdebug records' hook and
bytes from either source, and the fallback where the kernel refuses the fexit programs.
The kernel tests with real traffic are tests/test_collect_tcp_calls.py."""

from __future__ import annotations

import numpy as np
import pytest

from collector.bpf import btf, layout, loader, variants
from tests import kernel_expect
from tests.kernel_support import needs_bpf, tracing
from translators.kernel import KernelEnv, row_by_row
from translators.records import TcpDebugSnapshot, to_json
from translators.tcpdebug import translate_debug, translate_debug_batch

SOCK = ["sock_send_length", "sock_recv_length"]
TCP = list(variants.TCP_FUNCTIONS)
ENV = KernelEnv(host_id="h", boot_id="b", wall_offset=1_700_000_000.0)


def test_tcp_recvmsg_gets_the_program_of_its_parameters_on_5_10_and_6_1() -> None:
    for params, program in ((5, "tcp_recvmsg"), (6, "tcp_recvmsg__6")):
        choice = variants.choose(
            [*SOCK, *TCP], SOCK, ("tcpdebug",), lambda t: 3, func_args_of={"tcp_recvmsg": params}.get
        )
        assert choice.programs == {"tcp_sendmsg": "tcp_sendmsg", "tcp_recvmsg": program}


def test_with_the_functions_what_is_lost_is_what_they_do_not_see_not_the_calls() -> None:
    with_functions = variants.choose([*SOCK, *TCP], SOCK, ("tcp", "tcpdebug"), lambda t: 3, func_args_of=lambda f: 5)
    assert variants.by_provider(with_functions.degraded) == {
        "tcpdebug": {"tcp_debug.user": variants.TCP_FUNCTION_LOSES[0][2]},
        "tcp": {"attribution": variants.TCP_FUNCTION_LOSES[1][2]},
    }
    assert "sendfile/splice" in variants.TCP_FUNCTION_LOSES[0][2]
    without = variants.choose(SOCK, SOCK, ("tcp", "tcpdebug"), lambda t: 3)
    assert [d[:2] for d in without.degraded] == [
        ("tcpdebug", "tcp_debug.user_send"),
        ("tcp", "attribution"),
        ("tcpdebug", "tcp_debug.user_rcvd"),
    ]


def test_the_functions_are_loaded_only_without_the_socket_tracepoints(monkeypatch: pytest.MonkeyPatch) -> None:
    opts = loader.Options(providers=("tcp",))
    monkeypatch.setattr(loader, "tcp_functions_match", lambda: True)
    monkeypatch.setattr(loader, "socket_call_tracepoints", lambda: True)
    assert not set(TCP) & set(loader.program_names(opts))
    monkeypatch.setattr(loader, "socket_call_tracepoints", lambda: False)
    assert set(TCP) <= set(loader.program_names(opts))
    assert loader.tcp_call_source() == "kernel functions"
    # refused by the kernel, or other prototypes: neither (the absent tracepoints' losses say it)
    assert not set(TCP) & set(loader.program_names(opts, tcp_functions=False))
    assert loader.tcp_call_source(functions=False) == "none"
    monkeypatch.setattr(loader, "tcp_functions_match", lambda: False)
    assert loader.tcp_call_source() == "none" and not set(TCP) & set(loader.program_names(opts))


def debug_rows(user_hook: int) -> np.ndarray:
    """SEND, RCVD, SENDOOB, CONNECT user points and an input point, as the kernel writes them."""
    rows = np.zeros(5, dtype=layout.EVENT_DTYPES[layout.EV_DEBUG])
    rows["type"], rows["family"], rows["ctx"] = layout.EV_DEBUG, 2, 1
    rows["direction"] = [2, 2, 2, 2, 0]
    rows["prureq"] = [9, 8, 14, 4, 0xFF]
    rows["payload_len"] = [1000, 7, 1, 0, 1448]
    rows["has_seg"] = [0, 0, 0, 0, 1]
    rows["user_hook"] = [user_hook] * 4 + [0]
    return rows


@pytest.mark.parametrize(
    ("user_hook", "send", "receive"),
    [(0, "tp_btf/sock_send_length", "tp_btf/sock_recv_length"), (1, "fexit/tcp_sendmsg", "fexit/tcp_recvmsg")],
)
def test_a_calls_record_names_its_hook_and_carries_its_bytes_in_both_translations(
    user_hook: int, send: str, receive: str
) -> None:
    rows = debug_rows(user_hook)
    records = row_by_row(rows, ENV, translate_debug)
    got = [(r.prureq_str, r.hook, r.tcp_payload_len) for r in records if isinstance(r, TcpDebugSnapshot)]
    assert got == [
        ("SEND", send, 1000),
        ("RCVD", receive, 7),
        ("SENDOOB", send, 1),
        ("CONNECT", "tp_btf/inet_sock_set_state", None),
        (None, "tp_btf/tcp_probe", 1448),
    ]
    batch = translate_debug_batch(rows, KernelEnv(**{**ENV.__dict__, "wire": True}))
    assert [to_json(r) for r in batch] == [to_json(r) for r in records]  # type: ignore[arg-type]


@needs_bpf
@pytest.mark.kernel
def test_a_kernel_that_refuses_the_fexit_programs_keeps_the_tracepoints_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The TCP functions asked for where the kernel has the socket tracepoints: where the
    kernel refuses fexit (this machine, EPERM) or their prototypes are not kmod/'s (6.18's
    tcp_recvmsg has 4 parameters), the session loads again without them and says why;
    where it takes them, they load (pinned by kernel_expect's own fexit probe)."""
    monkeypatch.setattr(loader, "socket_call_tracepoints", lambda: False)
    monkeypatch.setattr(loader, "tcp_functions_match", lambda: True)
    declared = all(btf.func_args(f) in n for f, n in variants.TCP_FUNCTION_ARGS.items())
    taken = declared and kernel_expect.fexit_refused("tcp_sendmsg") is None
    with tracing(("tcpdebug",)) as cap:
        whys = [w for p, what, w in cap.session.degraded if (p, what) == ("tcpdebug", "tcp_call.kernel_functions")]
        assert cap.session.tcp_call_source() == ("kernel functions" if taken else "none")
        assert bool(set(TCP) & set(cap.session.links)) == taken
        assert set(SOCK) <= set(cap.session.links)  # this kernel has them: kept either way
        assert len(whys) == (0 if taken else 1)
        assert all(w.startswith("this kernel refused the fexit programs") for w in whys)

"""Program variants per kernel: which program each tracepoint gets for a kernel's prototypes,
what that costs, and that the older variants and the compat object really load here.

The prototypes below are those of the kernels nettrail is meant for (collector/bpf/variants.py);
6.1 and 6.12 are also booted by the kernel matrix (tests/test_kernel_matrix.py). The kernel
tests load the variants a 6.1 kernel gets on this machine's kernel: a tp_btf program that
reads fewer arguments than the tracepoint passes is valid on every later kernel.
"""

from __future__ import annotations

import pytest

from collector.bpf import btf, loader, variants
from tests.kernel_support import kernel

TPS = ("tcp_retransmit_skb", "tcp_send_reset", "kfree_skb", "udp_fail_queue_rcv_skb", "tcp_probe")
# tracepoint -> arguments passed, per kernel (read from each version's include/trace/events)
PROTOTYPES = {
    "5.15": {"tcp_retransmit_skb": 2, "tcp_send_reset": 2, "kfree_skb": 2, "udp_fail_queue_rcv_skb": 2},
    "6.1": {"tcp_retransmit_skb": 2, "tcp_send_reset": 2, "kfree_skb": 3, "udp_fail_queue_rcv_skb": 2},
    "6.8": {"tcp_retransmit_skb": 2, "tcp_send_reset": 2, "kfree_skb": 3, "udp_fail_queue_rcv_skb": 2},
    "6.12": {"tcp_retransmit_skb": 2, "tcp_send_reset": 3, "kfree_skb": 4, "udp_fail_queue_rcv_skb": 3},
    "6.18": {"tcp_retransmit_skb": 3, "tcp_send_reset": 3, "kfree_skb": 4, "udp_fail_queue_rcv_skb": 3},
}

HAS_RDONLY_CAST = {"6.8", "6.12", "6.18"}  # the kfunc came with 6.2


def plan(release: str, providers: tuple[str, ...] = loader.PROVIDERS, absent: tuple[str, ...] = ()) -> variants.Choice:
    args = PROTOTYPES[release]
    return variants.choose(TPS, absent, providers, lambda tp: args.get(tp, 2), lambda name: release in HAS_RDONLY_CAST)


def test_each_kernel_gets_the_variant_of_its_prototype() -> None:
    got = {release: plan(release).programs for release in PROTOTYPES}
    assert got["5.15"] == {
        "tcp_retransmit_skb": "tcp_retransmit_skb__2",
        "tcp_send_reset": "tcp_send_reset__2",
        "kfree_skb": "kfree_skb__2",
        "udp_fail_queue_rcv_skb": "udp_fail_queue_rcv_skb__2",
        "tcp_probe": "tcp_probe",
    }
    assert got["6.1"] == got["6.8"] == {**got["5.15"], "kfree_skb": "kfree_skb__3"}
    assert got["6.12"] == {
        **got["6.1"],
        "tcp_send_reset": "tcp_send_reset",
        "kfree_skb": "kfree_skb",
        "udp_fail_queue_rcv_skb": "udp_fail_queue_rcv_skb",
    }
    assert got["6.18"] == {tp: tp for tp in TPS}


def test_the_compat_object_is_for_kernels_without_bpf_rdonly_cast() -> None:
    assert [plan(r).object_name for r in ("5.15", "6.1", "6.8", "6.12")] == [
        "nettrail-compat.bpf.o",
        "nettrail-compat.bpf.o",
        "nettrail.bpf.o",
        "nettrail.bpf.o",
    ]


def test_what_is_lost_is_named_per_chosen_provider_only() -> None:
    on61 = plan("6.1", absent=("sock_send_length", "sock_recv_length"))
    assert variants.by_provider(on61.degraded) == {
        "tcp": {
            "tcp_retransmit.err": "tracepoint tcp_retransmit_skb passes no err on this kernel: always 0",
            "tcp_reset.reason": "tracepoint tcp_send_reset passes no reset reason on this kernel",
            "tcp_reset.no_socket": "tracepoint tcp_send_reset fires only for a socket's resets before Linux 6.10: "
            "a closed port's answer (reset-sent without a socket) is not recorded",
        },
        "skb": {"skb_drop.sock": "kfree_skb passes no rx_sk: a drop is tied to skb->sk only"},
        "skb-lifecycle": {"skb_drop.sock": "kfree_skb passes no rx_sk: a drop is tied to skb->sk only"},
        "tcpdebug": {
            "tcp_debug.drop_sock": "kfree_skb passes no rx_sk: an incoming segment's drop point has no socket"
        },
        "udp": {"udp_fail.truesize": "udp_fail_queue_rcv_skb passes no skb on this kernel"},
    }
    # sock_* are not in TPS here: only tracepoints the providers use are looked at
    assert plan("6.18").degraded == ()
    assert [d[:2] for d in plan("6.1", providers=("udp",)).degraded] == [("udp", "udp_fail.truesize")]
    absent = variants.choose(["sock_send_length"], ["sock_send_length"], ("udp", "tcpdebug"), lambda t: 3)
    assert [d[:2] for d in absent.degraded] == [("udp", "udp_call.send"), ("tcpdebug", "tcp_debug.user_send")]
    assert absent.programs == {}


def test_before_6_3_the_udp_calls_source_says_what_it_misses_not_that_the_calls_are_missing() -> None:
    sock = ["sock_send_length", "sock_recv_length"]
    tcpdebug = {
        "tcp_debug.user_send": "no sock_send_length tracepoint (Linux 6.3+): no SEND user requests",
        "tcp_debug.user_rcvd": "no sock_recv_length tracepoint (Linux 6.3+): no RCVD user requests",
    }
    for programs, losses in ((loader.FUNCTION_PROGRAMS, variants.FUNCTION_SOURCE_LOSES),
                             (loader.SYSCALL_PROGRAMS, variants.SYSCALL_SOURCE_LOSES)):  # fmt: skip
        choice = variants.choose([*sock, *programs], sock, ("udp-calls", "tcpdebug"), lambda t: 3)
        assert variants.by_provider(choice.degraded) == {"udp-calls": {"udp_call": losses[1][2]}, "tcpdebug": tcpdebug}
        assert set(choice.programs) == set(programs)
    # no raw_syscalls:sys_exit: no source, as without it
    nothing = variants.choose([*sock, "sys_exit"], [*sock, "sys_exit"], ("udp-calls",), lambda t: 3).degraded
    assert [d[:2] for d in nothing] == [("udp-calls", "udp_call.send"), ("udp-calls", "udp_call.receive")]


def test_the_udp_functions_are_chosen_only_with_the_prototypes_kmod_declares(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before 6.3 the UDP functions' exits, unless the kernel refused them or their
    parameters differ (a fexit program reads its return value after exactly these)."""
    monkeypatch.setattr(loader, "socket_call_tracepoints", lambda: False)  # a 6.1 kernel
    args = dict(variants.UDP_FUNCTION_ARGS)
    monkeypatch.setattr(loader.btf, "func_args", lambda name: args.get(name))
    opts = loader.Options(providers=("udp-calls",))
    assert loader.udp_call_source(opts) == "kernel functions"
    assert loader.udp_call_source(opts, functions=False) == "system calls"  # refused at load
    args["udp_recvmsg"] = 4  # 6.18's udp_recvmsg has no addr_len
    assert loader.udp_call_source(opts) == "system calls"
    forced = loader.Options(providers=("udp-calls",), udp_call_source="socket tracepoints")
    assert loader.udp_call_source(forced) == "socket tracepoints"
    with pytest.raises(ValueError, match="choose from socket tracepoints, kernel functions, system calls"):
        loader.udp_call_source(loader.Options(udp_call_source="carrier pigeon"))


def test_the_running_kernels_prototypes_are_read_from_btf() -> None:
    if btf.tracepoint_args("tcp_probe") is None:
        pytest.skip("needs kernel BTF (/sys/kernel/btf/vmlinux)")
    assert btf.tracepoint_args("tcp_probe") == 2  # (sk, skb) on every kernel since 4.16
    assert btf.tracepoint_args("inet_sock_set_state") == 3
    assert btf.tracepoint_args("no_such_tracepoint") is None
    assert btf.has_member("tcp_sock", "snd_cwnd") and not btf.has_member("tcp_sock", "no_such_field")
    assert not btf.kfunc_exists("no_such_kfunc")


@pytest.mark.parametrize("release", ["5.15", "6.1"])
@pytest.mark.parametrize("compat", [False, True], ids=["object", "compat-object"])
def test_the_oldest_variants_load_and_attach_for_every_provider_here(
    release: str, compat: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for mark in kernel:
        if mark.name == "skipif" and mark.args[0]:
            pytest.skip(mark.kwargs["reason"])
    args = PROTOTYPES[release]
    real = btf.tracepoint_args
    monkeypatch.setattr(btf, "tracepoint_args", lambda tp: args.get(tp, real(tp)))
    monkeypatch.setattr(btf, "kfunc_exists", lambda name: not compat)
    with loader.KernelSession(loader.Options()) as s:
        assert s.path.name == ("nettrail-compat.bpf.o" if compat else "nettrail.bpf.o")
        assert s.failed == {}
        assert set(s.links) == {tp for tp in s.program_names() if tp not in s.absent}
        assert (s.cgroup_why is None) == (not compat)  # before 6.2 skb notes UDP senders at net_dev_queue
        assert {tp: s.choice.programs[tp] for tp in args} == {tp: plan(release).programs[tp] for tp in args}

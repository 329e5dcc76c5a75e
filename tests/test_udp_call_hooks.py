"""Where a UDP call record was seen, by the kernel's `call` value (translators/udp.py,
NT_UDP_CALL_* in kmod/nettrail.h): the socket tracepoints (6.3+), the UDP functions' exits
(an IPv6 socket's are udpv6_*), the system calls; each is a call for the UDP page."""

from __future__ import annotations

from translators.kernel import AF_INET, AF_INET6
from translators.udp import CALL_HOOKS, call_hook


def test_each_source_names_its_hook_and_every_one_is_a_call() -> None:
    def hook(direction: int, call: int, family: int = AF_INET) -> str:
        return call_hook({"direction": direction, "call": call, "family": family})

    assert [hook(1, 1), hook(0, 1)] == ["tp_btf/sock_send_length", "tp_btf/sock_recv_length"]
    assert [hook(1, 5), hook(0, 5)] == ["fexit/udp_sendmsg", "fexit/udp_recvmsg"]
    assert [hook(1, 5, AF_INET6), hook(0, 5, AF_INET6)] == ["fexit/udpv6_sendmsg", "fexit/udpv6_recvmsg"]
    assert [hook(1, n) for n in (2, 3, 4)] == [
        "tp_btf/sys_exit:sendto",
        "tp_btf/sys_exit:sendmsg",
        "tp_btf/sys_exit:sendmmsg",
    ]
    assert hook(0, 2, AF_INET6) == "tp_btf/sys_exit:recvfrom"  # a system call is the same for both families
    made = {hook(d, c, f) for d in (0, 1) for c in range(1, 6) for f in (AF_INET, AF_INET6)}
    assert made == set(CALL_HOOKS) and not {"tp_btf/net_dev_queue", "tp_btf/netif_receive_skb"} & made

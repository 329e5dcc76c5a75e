"""H3: which rules a provider set and an attach outcome leave unavailable or degraded, and why
(collector/health/coverage.py). The real collector's status is tested in
tests/test_collect_selfhealth.py."""

from __future__ import annotations

from collector.bpf import loader
from collector.health.coverage import RULE_INPUTS, WATCHED_DROP_REASONS, Attach, assess

ALL_REASONS = frozenset(WATCHED_DROP_REASONS)


def attach(providers: str, *, absent: tuple[str, ...] = (), failed: dict[str, str] | None = None,
           reasons: frozenset[str] = ALL_REASONS, stack: bool = True) -> Attach:  # fmt: skip
    chosen = tuple(providers.split(","))
    wanted = [n for n, needed in loader.PROGRAMS.items() if needed & set(chosen)]
    failed = failed or {}
    attached = frozenset(n for n in wanted if n not in absent and n not in failed)
    return Attach(frozenset(chosen), attached, frozenset(absent), failed, reasons, stack)


def test_every_rule_of_anomalies_section_4_is_assessed():
    assert sorted(RULE_INPUTS, key=lambda r: int(r[1:])) == [f"K{i}" for i in range(1, 15)]


def test_everything_chosen_and_attached_leaves_every_rule_available():
    unavailable, degraded = assess(attach("tcp,siftr,skb,udp"))
    assert unavailable == {}
    assert degraded == {}


def test_the_default_providers_cannot_see_drops():
    unavailable, degraded = assess(attach("tcp,siftr"))
    assert unavailable == {
        "K11": "no skb drops: provider skb or skb-lifecycle not chosen (--providers)",
        "K12": "no skb drops: provider skb or skb-lifecycle not chosen (--providers)",
    }
    assert sorted(degraded) == ["K2", "K4", "K5", "K9"]
    assert degraded["K2"] == (
        "without path-MTU black holes (pmtu-black-hole) (packets too big for a forwarding hop's next link: provider "
        "skb or skb-lifecycle not chosen (--providers))"
    )
    assert degraded["K4"] == (
        "listen overflows from the stack counters instead (provider skb or skb-lifecycle not chosen (--providers))"
    )


def test_an_absent_tcp_probe_makes_the_sample_rules_unavailable():
    unavailable, _ = assess(attach("tcp,siftr,skb,udp", absent=("tcp_probe",)))
    assert sorted(unavailable) == ["K1", "K13", "K6", "K7"]
    assert (
        unavailable["K7"]
        == "no SIFTR or tcpdebug samples (cwnd, srtt, windows): tracepoint tcp_probe absent on this kernel; "
        "provider siftr-poll not chosen (--providers)"
    )


def test_polled_siftr_samples_serve_the_sample_rules_and_say_they_are_polled():
    unavailable, degraded = assess(attach("tcp,siftr-poll,skb,udp-calls"))
    assert unavailable == {}
    polled = (
        "SIFTR samples polled every --poll-interval (siftr-poll), not taken at packets: a change shorter than "
        "the interval can be missed"
    )
    assert {rule: degraded[rule] for rule in ("K1", "K6", "K7", "K13")} == dict.fromkeys(
        ("K1", "K6", "K7", "K13"), polled
    )
    assert "K5" not in degraded  # receive windows from polled samples too; its drops from skb
    unavailable, _ = assess(attach("tcp,siftr-poll,skb,udp-calls", failed={"siftr_poll": "Operation not permitted"}))
    assert sorted(unavailable) == ["K1", "K13", "K6", "K7"]


def test_an_absent_congestion_state_tracepoint_degrades_k2_and_k6():
    unavailable, degraded = assess(attach("tcp,siftr,skb,udp", absent=("tcp_cong_state_set",)))
    assert unavailable == {}
    assert degraded == {
        "K2": "without Loss-state entries (RTO told by ca_state only) (congestion-state changes: tracepoint "
        "tcp_cong_state_set absent on this kernel)",
        "K6": "without Loss entries between samples (congestion-state changes: tracepoint tcp_cong_state_set "
        "absent on this kernel)",
    }


def test_a_kernel_without_the_listen_overflow_reason_falls_back_to_counters_or_loses_k4():
    reasons = ALL_REASONS - {"TCP_LISTEN_OVERFLOW"}
    _, degraded = assess(attach("tcp,siftr,skb,udp", reasons=reasons))
    assert degraded == {
        "K4": "listen overflows from the stack counters instead (drop reason TCP_LISTEN_OVERFLOW not in this "
        "kernel's BTF)"
    }
    unavailable, _ = assess(attach("tcp,siftr,skb,udp", reasons=reasons, stack=False))
    assert unavailable == {
        "K4": "no listen overflows: drop reason TCP_LISTEN_OVERFLOW not in this kernel's BTF; the stack counters "
        "are off (--no-stack-counters)"
    }


def test_a_failed_attach_names_the_error():
    unavailable, _ = assess(attach("tcp,siftr,skb,udp", failed={"kfree_skb": "No such device"}))
    assert unavailable["K12"] == "no skb drops: tracepoint kfree_skb failed to attach (No such device)"
    assert sorted(unavailable) == ["K11", "K12"]

"""Rule H4 checks the agent's whole cost: a collector whose own process stays under the
budget but whose programs' kernel time takes it over is warned about, the sentence says
where the time went; a collector that could not measure its programs is checked on its
process's CPU alone, as before."""

from __future__ import annotations

from tests.alert_streams import BOOT, HOST, Stream, engine, feed_all, only
from translators.records import CollectorStats


def stats(s: Stream, process: float, programs_ns: int | None, children_s: float = 0.0) -> CollectorStats:
    """A 10 s interval: the process's CPU percent, its programs' ns (None: unknown), its children's s."""
    s.seq += 1
    agent = None if programs_ns is None else round(process + 10 * (children_s + programs_ns / 1e9), 3)
    return CollectorStats(
        host_id=HOST, boot_id=BOOT, seq=s.seq, ts_ns=1, ts_wall=s.t, provider="nettrail", probe="stats", pid=777,
        tgid=777, comm="nettrail", interval_s=10.0, cpu_time_s=process / 10, cpu_total_s=100.0, cpu_percent=process,
        events=1000, events_per_s=100.0, records=1000, events_by_type={"tcp_state": 1000},
        children_cpu_time_s=children_s, programs_run_time_ns=programs_ns, programs_run_count=None if programs_ns is None else 5000,
        agent_cpu_percent=agent,
    )  # fmt: skip


def test_programs_time_that_takes_the_agent_over_the_budget_fires_h4_and_says_where_it_went() -> None:
    s, e = Stream(), engine()
    over = stats(s, 3.0, 250_000_000, children_s=0.02)  # 3% + 2.5% programs + 0.2% children
    alerts = only(feed_all(e, [over]), "H4")
    assert [(a.condition, a.metric, a.evidence) for a in alerts] == [("cpu", 5.7, [over.seq])]
    assert alerts[0].message.startswith(
        "The collector (pid 777) used 5.7% of one CPU over 10.0 s (its process 3.0%, its children 0.2%, its eBPF "
        "programs in the kernel 2.5%), above the 5% budget"
    )


def test_a_collector_that_could_not_measure_its_programs_is_checked_on_its_process_alone() -> None:
    s, e = Stream(), engine()
    unknown = stats(s, 4.0, None)
    assert only(feed_all(e, [unknown]), "H4") == []
    s.advance(10)
    busy = stats(s, 6.0, None)
    alerts = only(feed_all(e, [busy]), "H4")
    assert [a.metric for a in alerts] == [6.0]
    assert alerts[0].message.startswith("The collector (pid 777) used 6.0% of one CPU over 10.0 s, above the 5% budget")

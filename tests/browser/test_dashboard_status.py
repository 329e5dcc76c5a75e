"""The status page in Chromium: a collector's attach coverage (tracepoints attached or
absent, rules unavailable or degraded), its CPU chart against rule H4's budget with the
H4 alert, sampling and losses, a newer status arriving live; and the connection page's
sampling ratio beside the cwnd and srtt charts. Records: tests/selfhealth_cast.py."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from tests.selfhealth_cast import ABSENT, ATTACHED, PID, conn_uuid, records

from .conftest import PAINTED, Server, screenshot

pytestmark = pytest.mark.browser
# A host of its own: the live kernel test's real collector reports its status for the
# package's shared host, and the newest status is what the page shows.
HOST = "status-host"


@pytest.fixture(scope="module")
def selfhealth(server: Server) -> list[Any]:
    host = Server(server.url, server.make_token(HOST), server.data_dir)
    batch = records(HOST)
    assert host.ingest(batch) == {"stored": len(batch), "duplicates": 0, "tracing": None}
    return [host, *batch]


def rows(page: Any, selector: str) -> dict[str, list[str]]:
    cells = page.locator(selector).evaluate_all("rs => rs.map(r => [...r.cells].map(c => c.textContent))")
    return {row[0]: row for row in cells}


def test_the_status_page_shows_attach_coverage_cpu_and_sampling(server: Server, page: Any, selfhealth: Any) -> None:
    page.goto(f"{server.url}/status/?host={HOST}")
    page.wait_for_selector("body[data-loaded='1']")
    panel = page.locator(f"section.host-status[data-host='{HOST}']")
    assert panel.locator("h2").inner_text() == f"Collector on {HOST}"
    assert panel.locator("[data-item='Stopped']").count() == 0  # its last record is not a stop
    summary = dict(
        zip(panel.locator(".summary dt").all_inner_texts(), panel.locator(".summary dd").all_inner_texts(), strict=True)
    )
    assert summary["Process"] == f"nettrail (pid {PID})" and summary["Kernel"] == "6.18.44-test"
    assert (summary["Providers"], summary["Sampling"], summary["CPU"]) == ("tcp, siftr", "ppl 4", "3.00 % of one CPU")
    tracepoints = rows(page, f"section.host-status[data-host='{HOST}'] table.tracepoints tbody tr")
    assert {tp: (r[1], r[2]) for tp, r in tracepoints.items()} == {
        **{tp: ("attached", str(pid)) for tp, pid in ATTACHED.items()},
        **{tp: ("absent on this kernel", "–") for tp in ABSENT},
    }
    rules = rows(page, f"section.host-status[data-host='{HOST}'] table.rules tbody tr")
    assert {r: row[1] for r, row in rules.items()} == {
        "K11": "unavailable", "K12": "unavailable", "K2": "degraded", "K4": "degraded", "K5": "degraded",
        "K6": "degraded", "K9": "degraded",
    }  # fmt: skip
    assert rules["K12"][2] == "no skb drops: provider skb or skb-lifecycle not chosen (--providers)"
    assert "tracepoint tcp_cong_state_set absent on this kernel" in rules["K6"][2]
    sampling = rows(page, f"section.host-status[data-host='{HOST}'] table.sampling tbody tr")
    assert sampling["siftr_sample"][1:5] == ["ppl 4", "4,000", "1,000", "1 in 4.00"]
    assert rows(page, f"section.host-status[data-host='{HOST}'] table.losses tbody tr")["siftr_sample"][1] == "3"
    alerts = panel.locator("table.alerts tbody tr")
    assert alerts.count() == 1 and "used 7.5% of one CPU" in alerts.inner_text()
    assert page.evaluate(PAINTED, ["cpu-0", "#0b5cad"]) > 20  # the CPU line
    assert page.evaluate(PAINTED, ["cpu-0", "#b3261e"]) > 20  # the 5 % budget line
    assert page.evaluate(PAINTED, ["events-0", "#1f7a3a"]) > 20
    assert page.evaluate("NT.charts['cpu-0'].data[1]") == [2.0, 7.5, 3.0]
    screenshot(page, "status")


def test_a_new_collector_status_replaces_the_old_one_without_a_reload(
    server: Server, page: Any, selfhealth: list[Any]
) -> None:
    page.goto(f"{server.url}/status/?host={HOST}")
    page.wait_for_selector("body[data-loaded='1']")
    page.wait_for_function(
        f"(document.body.dataset.liveGroups || '').split(' ').includes('host.{HOST}')", timeout=30_000
    )
    page.evaluate("window.notReloaded = true")
    host, first = selfhealth[0], selfhealth[1]
    restarted = msgspec.structs.replace(
        first, seq=10_000, ts_wall=first.ts_wall + 100, pid=PID + 1, absent=[], rules_degraded={}, rules_unavailable={},
        attached={**first.attached, "tcp_cong_state_set": 999},
    )  # fmt: skip
    host.ingest([restarted])
    page.wait_for_selector("table.tracepoints tr[data-tracepoint='tcp_cong_state_set'][data-state='attached']")
    assert (
        page.locator("table.rules tbody tr").inner_text() == "Every rule can fire with these providers on this kernel."
    )
    assert page.evaluate("window.notReloaded") is True


def test_staff_reach_the_hosts_tracing_form_from_its_panel_and_change_it(
    server: Server, page: Any, selfhealth: list[Any]
) -> None:
    """The panel's link opens the host's tracing page; the admin's choice is saved and
    its host's next ingest answer carries it (webapp/dashboard/tracing.py)."""
    page.goto(f"{server.url}/status/?host={HOST}")
    page.wait_for_selector("body[data-loaded='1']")
    page.locator(f"section.host-status[data-host='{HOST}'] a.tracing-link").click()
    page.wait_for_selector("body[data-page='tracing'][data-loaded='1']")  # js/tracing.js drew "Running"
    assert page.locator("#tracing-host").inner_text() == HOST
    assert page.locator("#tracing-requested").inner_text() == "nothing: the collector's own choice"
    assert "tcp, siftr, its own choice" in page.locator("#tracing-running").inner_text()
    for provider in ("tcp", "skb", "skb-lifecycle"):
        page.locator(f"#tracing-form input[name='providers'][value='{provider}']").check()
    page.locator("#tracing-form input[name='skb_sample']").fill("64")
    page.locator("#tracing-form input[name='skb_window']").fill("0.50/5")
    page.locator("#tracing-set").click()
    page.wait_for_selector("#tracing-saved")
    screenshot(page, "tracing")
    assert (
        page.locator("#tracing-requested")
        .inner_text()
        .startswith("tcp, skb, skb-lifecycle (skb-lifecycle: one buffer in 64, in windows 0.5/5 s) — set by admin at ")
    )
    host = selfhealth[0]
    page.wait_for_function(
        f"(document.body.dataset.liveGroups || '').split(' ').includes('host.{HOST}')", timeout=30_000
    )
    # the collector's answer to the request: its status after the swap, shown without a reload
    swapped = msgspec.structs.replace(
        selfhealth[1], seq=20_000, ts_wall=selfhealth[1].ts_wall + 200, providers=["tcp", "skb", "skb-lifecycle"],
        providers_from="dashboard", untraced_ns=1234, skb_sample=64, skb_stages="ends", skb_window="0.5/5",
    )  # fmt: skip
    answer = host.ingest([swapped])
    assert answer["tracing"] == {"providers": ["tcp", "skb", "skb-lifecycle"], "skb_sample": 64, "skb_window": "0.5/5"}
    page.wait_for_function("document.getElementById('tracing-running').textContent.startsWith('tcp, skb, skb-')")
    assert page.locator("#tracing-running").inner_text() == (
        "tcp, skb, skb-lifecycle (skb-lifecycle: one buffer in 64, in windows of 0.5 s every 5 s), as the "
        "dashboard asked; nothing was traced for 1234 ns while its programs were swapped"
    )
    page.goto(f"{server.url}/status/?host={HOST}")  # the panel says who chose the set and the swap's gap
    page.wait_for_selector("body[data-loaded='1']")
    panel = page.locator(f"section.host-status[data-host='{HOST}']")
    summary = dict(
        zip(panel.locator(".summary dt").all_inner_texts(), panel.locator(".summary dd").all_inner_texts(), strict=True)
    )
    assert (summary["Providers"], summary["Chosen by"], summary["Not traced while swapping"]) == (
        "tcp, skb, skb-lifecycle", "the dashboard", "0.001 ms",
    )  # fmt: skip
    assert "skb-window 0.5/5 (lifecycle hooks attached 0.5 s of every 5 s)" in summary["Sampling"]
    page.goto(f"{server.url}/status/tracing/?host={HOST}")
    page.locator("#tracing-own").click()  # back to the collector's own choice: other tests see it unchanged
    page.wait_for_selector("#tracing-saved")
    requested = page.locator("#tracing-requested").inner_text()
    assert requested.startswith("nothing: the collector's own choice — set by admin at ")


def test_the_connection_page_shows_the_sampling_ratio_beside_cwnd_and_srtt(
    server: Server, page: Any, selfhealth: Any
) -> None:
    page.goto(f"{server.url}/connections/{conn_uuid(HOST)}/")
    page.wait_for_selector("body[data-loaded='1']")
    note = page.locator("#siftr-sampling")
    assert note.is_visible() and note.get_attribute("data-ratio") == "6"
    assert note.inner_text().startswith(
        "Sampled: one SIFTR sample per 6.00 packets (1,200 packets, 200 samples, counted exactly in the kernel); "
        "latest window 4.00 (400 packets at"
    )
    titles = page.locator(".chart-grid .u-title").all_inner_texts()
    assert titles[:2] == ["cwnd and ssthresh, segments × MSS (sampled 1 in 6.0)", "srtt and rttvar (sampled 1 in 6.0)"]
    assert page.evaluate(PAINTED, ["chart-cwnd", "#0b5cad"]) > 20


def test_a_collector_that_stopped_says_so_in_its_panel(server: Server, page: Any) -> None:
    """Its last collector_stats says stopped (SIGTERM, Ctrl-C, --duration; not a swap)."""
    from translators.records import CollectorStats

    host = "stopped-status-host"
    other = Server(server.url, server.make_token(host), server.data_dir)
    batch = records(host)
    stats = [r for r in batch if isinstance(r, CollectorStats)]
    last = msgspec.structs.replace(stats[-1], seq=20_000, ts_wall=stats[-1].ts_wall + 10, stopped=True)
    assert other.ingest([*batch, last])["stored"] == len(batch) + 1
    page.goto(f"{server.url}/status/?host={host}")
    page.wait_for_selector("body[data-loaded='1']")
    item = page.locator(f"section.host-status[data-host='{host}'] [data-item='Stopped'] dd")
    assert item.inner_text().endswith("(SIGTERM, Ctrl-C or --duration): not tracing since")


def test_the_status_page_says_how_often_siftr_poll_polled_and_which_namespaces_it_and_the_counters_missed(
    server: Server, page: Any
) -> None:
    """A namespace the poller could not enter is in the collector's record, not only on its
    stderr: its sockets have no polled samples meanwhile, and the page says so."""
    host_id = "poll-status-host"
    host = Server(server.url, server.make_token(host_id), server.data_dir)
    [status, first, *_] = records(host_id)
    why = "net:[4026532999] (/proc/4242/ns/net): [Errno 1] Operation not permitted"
    gone = "network namespace 4026533001 (blue) is gone: its stack counters' moves since their last read are unread"
    stats = msgspec.structs.replace(
        first, poll_interval_s=1.6, poll_missed={"4026532999": why}, counters_missed={"4026533001": gone}
    )
    assert host.ingest([status, stats])["stored"] == 2
    page.goto(f"{server.url}/status/?host={host_id}")
    page.wait_for_selector("body[data-loaded='1']")
    panel = page.locator(f"section.host-status[data-host='{host_id}']")
    summary = dict(
        zip(panel.locator(".summary dt").all_inner_texts(), panel.locator(".summary dd").all_inner_texts(), strict=True)
    )
    assert summary["SIFTR polls"] == "every 1.600 s"
    assert summary["Not polled: netns 4026532999"] == why
    assert summary["Counters not read: netns 4026533001"] == gone  # the stack counters' misses too


def test_the_status_page_shows_the_agents_whole_cost_with_its_programs_kernel_time(server: Server, page: Any) -> None:
    """Beside its process's CPU: its children's CPU, its programs' kernel time (runs, ns
    each) and the whole that H4 checks, as text and as lines of the CPU chart."""
    from translators.records import CollectorStats

    host = "agent-cost-host"
    other = Server(server.url, server.make_token(host), server.data_dir)
    batch = records(host)
    stats = [r for r in batch if isinstance(r, CollectorStats)]
    measured = [
        msgspec.structs.replace(r, children_cpu_time_s=0.02, programs_run_time_ns=250_000_000 * (i + 1),
                                programs_run_count=4000, programs_run_time_total_ns=250_000_000 * (i + 1) * (i + 2) // 2,
                                agent_cpu_percent=round(r.cpu_percent + 0.2 + 2.5 * (i + 1), 3))
        for i, r in enumerate(stats)
    ]  # fmt: skip
    assert other.ingest([r for r in batch if not isinstance(r, CollectorStats)] + measured)["stored"] == len(batch)
    page.goto(f"{server.url}/status/?host={host}")
    page.wait_for_selector("body[data-loaded='1']")
    panel = page.locator(f"section.host-status[data-host='{host}']")
    items = {k: panel.locator(f"[data-item=\"{k}\"] dd").inner_text() for k in (
        "CPU", "Children's CPU", "Programs in the kernel", "Whole cost (H4)", "CPU since start")}  # fmt: skip
    assert items == {
        "CPU": "3.00 % of one CPU",
        "Children's CPU": "0.20 % of one CPU",
        "Programs in the kernel": "7.50 % of one CPU (4,000 runs, 187,500 ns each)",
        "Whole cost (H4)": "10.70 % of one CPU",
        "CPU since start": "1.3 s, programs 1.500 s since loaded",
    }
    assert page.evaluate("NT.charts['cpu-0'].data.slice(1, 4)") == [[2.0, 7.5, 3.0], [2.5, 5.0, 7.5], [4.7, 12.7, 10.7]]
    assert page.evaluate(PAINTED, ["cpu-0", "#8a4baf"]) > 20  # the programs' line

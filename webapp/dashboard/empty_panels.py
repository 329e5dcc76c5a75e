"""Why a panel is empty: the provider that records its rows is not running (and how to
enable it), the host is an uploaded capture, or the provider runs but recorded nothing.

A bare panel header told the user nothing (issue 18 item 3: the skb-lifecycle and
tcpdebug panels); each empty panel now names the cause from the host's newest
``collector_status`` (its ``providers``), as the UDP page does (selfhealth.provider_off).
Keep in sync with: collector/bpf/loader.py PROVIDERS, docs/collector.md, js/connection.js,
js/buffers.js, js/counters.js.
"""

from __future__ import annotations

from typing import Any

from webapp.dashboard.selfhealth import newest_status
from webapp.traces.tokens import CAPTURE_PREFIX

# panel -> (what its rows are, the providers that record them: the first is the one to enable)
PANELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "siftr": ("SIFTR samples", ("siftr-poll", "siftr")),
    "tcpdebug": ("tcpdebug snapshots", ("tcpdebug",)),
    "skbs": ("skb lifecycles", ("skb-lifecycle",)),
    "drops": ("drops", ("skb", "skb-lifecycle", "tcpdebug")),
    # the Counters page's IP flows (a per-packet provider, off by default)
    "ip_flows": ("IP flow counters", ("ip-flows",)),
}


def newest_providers(host: str) -> list[str] | None:
    """The providers of the host's newest collector_status; None when it sent none."""
    row = newest_status(host, "providers")
    return None if row is None else list(row["providers"] or [])


def why(host: str, panel: str, providers: list[str] | None, scope: str = "this connection") -> str:
    what, recorders = PANELS[panel]
    wanted = recorders[0]
    if host.startswith(CAPTURE_PREFIX):
        return f"No {what}: {host} is an uploaded capture; {what} come from a live collector's {wanted} provider."
    if providers is None:
        return (
            f"No {what}: {host} sent no collector_status, so which providers its collector runs is unknown; "
            f"{what} need the {wanted} provider (nettrail collect --providers tcp,siftr,{wanted})."
        )
    if not any(p in providers for p in recorders):
        return (
            f"No {what}: the collector on {host} runs {', '.join(providers) or 'no provider'}, not {wanted}. "
            f"Enable it: nettrail collect --providers {','.join([*providers, wanted])} "
            f"(nettrail up: NETTRAIL_PROVIDERS={','.join([*providers, wanted])}), or on the dashboard: "
            f"Status, What it traces (staff; followed by a collector run with --providers-from-server, "
            f"as nettrail up's is)."
        )
    return f"No {what} recorded for {scope} (the collector on {host} runs {', '.join(providers)})."


CONNECTION_PANELS = ("siftr", "tcpdebug", "skbs", "drops")


def connection_panels(host: str) -> dict[str, str]:
    """Each connection-page panel's reason, shown only when the panel has no rows."""
    providers = newest_providers(host)
    return {panel: why(host, panel, providers) for panel in CONNECTION_PANELS}


def hosts_panel(hosts: list[str], panel: str) -> list[dict[str, Any]]:
    """Per host, the reason a page-wide panel (the Buffers page's drops, the Counters
    page's IP flows) is empty."""
    return [{"host_id": h, "why": why(h, panel, newest_providers(h), scope="this host")} for h in hosts]

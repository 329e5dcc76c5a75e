/* Status page: one panel per collector host from /api/dash/status -- attach coverage
   (tracepoints, rules unavailable or degraded), the agent's whole cost (its process's CPU,
   its children's and its programs' kernel time) against rule H4's budget and its events/s
   (uPlot), sampling ratios, losses and self-health alerts; refreshed when the live feed
   brings the collector's own records. */
"use strict";

(() => {
  const { el, num, bytes, time, datetime } = NT;
  const pd = NT.pageData;
  const form = document.getElementById("select");
  const charts = {};
  NT.charts = charts; // uPlot instances by figure id (handy from the console and the browser tests)
  const SELF_KINDS = ["collector_status", "collector_stats", "sampling_report", "loss_report", "alert"];

  function table(cls, headings, rows, empty) {
    const body = rows.length ? rows : [el("tr", {}, el("td", { colspan: headings.length, class: "muted", text: empty }))];
    return el("table", { class: cls },
      el("thead", {}, el("tr", {}, ...headings.map(([h, numeric]) => el("th", { scope: "col", class: numeric ? "num" : null, text: h })))),
      el("tbody", {}, ...body));
  }

  function summary(h) {
    const s = h.status || {};
    const last = h.latest || {};
    const sampling = [s.ppl > 1 ? `ppl ${s.ppl}` : null, s.ip_sample ? `ip-sample ${s.ip_sample}` : null,
      s.drop_rate ? `drop-rate ${s.drop_rate}/s per CPU` : null, s.skb_sample > 1 ? `skb-sample ${s.skb_sample}` : null,
      s.skb_stages === "ends" ? "skb-stages ends (no transmit or receive entry stages)" : null,
      s.skb_window ? `skb-window ${s.skb_window} (lifecycle hooks attached ${s.skb_window.replace("/", " s of every ")} s)` : null,
    ].filter(Boolean).join(", ") || "every event";
    const items = [
      ["Process", s.pid ? `${s.comm || "?"} (pid ${s.pid})` : "–"], ["Kernel", s.kernel_release || "–"],
      ["Started", s.ts_wall ? datetime(s.ts_wall) : "–"], ["Providers", (s.providers || []).join(", ") || "–"],
      ["Chosen by", s.providers_from === "dashboard" ? "the dashboard" : (s.providers ? "its command line" : "–")],
      // a swap of programs (the dashboard changed the set): how long nothing was traced
      ...(s.untraced_ns === null || s.untraced_ns === undefined ? [] : [["Not traced while swapping", `${num(s.untraced_ns / 1e6, 3)} ms`]]),
      ["Sampling", sampling], ["Stack counters", s.stack_counters === null || s.stack_counters === undefined ? "–" : (s.stack_counters ? "read" : "off")],
      ["CPU", last.cpu_percent === undefined ? "–" : `${num(last.cpu_percent, 2)} % of one CPU`],
      ...agentCost(last),
      ["Events/s", last.events_per_s === undefined ? "–" : num(last.events_per_s)], ["Memory", bytes(last.rss_bytes)],
      // siftr-poll: the pace its polls kept and the network namespaces they could not reach
      ...(last.poll_interval_s === null || last.poll_interval_s === undefined ? [] : [["SIFTR polls", `every ${num(last.poll_interval_s, 3)} s`]]),
      ...Object.entries(last.poll_missed || {}).map(([netns, why]) => [`Not polled: netns ${netns}`, why]),
      // stack counters: namespaces unreadable, or gone with their last moves unread, in its last interval
      ...Object.entries(last.counters_missed || {}).map(([netns, why]) => [`Counters not read: netns ${netns}`, why]),
      // its last record said it stopped (not a swap): nothing is traced on this host since
      ...(last.stopped ? [["Stopped", `${datetime(last.ts_wall)} (SIGTERM, Ctrl-C or --duration): not tracing since`]] : []),
    ];
    return el("dl", { class: "summary" }, ...items.map(([k, v]) => el("div", { dataset: { item: k } }, el("dt", { text: k }), el("dd", { text: v }))));
  }

  // The rest of the agent's cost beside its process's CPU (H4 checks the whole); a
  // collector that could not measure its programs says so rather than showing 0.
  function agentCost(last) {
    if (last.cpu_percent === undefined) return [];
    const known = (v) => v !== null && v !== undefined;
    const programs = known(last.programs_run_time_ns)
      ? `${num(last.programs_percent, 2)} % of one CPU (${num(last.programs_run_count)} runs, ${num(last.programs_run_time_ns / Math.max(last.programs_run_count, 1))} ns each)`
      : "unknown (the kernel refused its run-time statistics, or an older collector)";
    return [
      ["Children's CPU", known(last.children_percent) ? `${num(last.children_percent, 2)} % of one CPU` : "unknown"],
      ["Programs in the kernel", programs],
      ["Whole cost (H4)", known(last.agent_cpu_percent) ? `${num(last.agent_cpu_percent, 2)} % of one CPU` : "unknown"],
      ["CPU since start", `${num(last.cpu_total_s, 1)} s` + (known(last.programs_run_time_total_ns)
        ? `, programs ${num(last.programs_run_time_total_ns / 1e9, 3)} s since loaded` : "")],
    ];
  }

  function tracepoints(s) {
    if (!s) return el("p", { class: "muted", text: "No collector_status record from this host." });
    const rows = [
      ...Object.entries(s.attached).map(([tp, id]) => el("tr", { dataset: { tracepoint: tp, state: "attached" } },
        el("td", {}, el("code", { text: tp })), el("td", { text: "attached" }), el("td", { class: "num", text: String(id) }))),
      ...s.absent.map((tp) => el("tr", { dataset: { tracepoint: tp, state: "absent" } },
        el("td", {}, el("code", { text: tp })), el("td", { class: "bad", text: "absent on this kernel" }), el("td", { class: "num", text: "–" }))),
      ...Object.entries(s.failed).map(([tp, why]) => el("tr", { dataset: { tracepoint: tp, state: "failed" } },
        el("td", {}, el("code", { text: tp })), el("td", { class: "bad wrap", text: `failed: ${why}` }), el("td", { class: "num", text: "–" }))),
    ];
    return table("tracepoints", [["Tracepoint"], ["State"], ["Program id", true]], rows, "No program attached.");
  }

  function rules(s) {
    if (!s) return el("p", { class: "muted", text: "Unknown until the collector reports its status." });
    const rows = [
      ...Object.entries(s.rules_unavailable).map(([r, why]) => el("tr", { dataset: { rule: r, state: "unavailable" } },
        el("td", {}, el("a", { href: `/alerts/?rule=${encodeURIComponent(r)}`, text: r })), el("td", {}, el("span", { class: "badge sev-warning", text: "unavailable" })), el("td", { class: "wrap", text: why }))),
      ...Object.entries(s.rules_degraded).map(([r, why]) => el("tr", { dataset: { rule: r, state: "degraded" } },
        el("td", {}, el("a", { href: `/alerts/?rule=${encodeURIComponent(r)}`, text: r })), el("td", {}, el("span", { class: "badge sev-notice", text: "degraded" })), el("td", { class: "wrap", text: why }))),
    ];
    const out = [table("rules", [["Rule"], ["Status"], ["Why"]], rows, "Every rule can fire with these providers on this kernel.")];
    if (s.missing_drop_reasons.length) out.push(el("p", { class: "legend-note missing-reasons", text: `Drop reasons this kernel's BTF lacks: ${s.missing_drop_reasons.join(", ")}.` }));
    return el("div", {}, ...out);
  }

  function overheadCharts(h, i, budget) {
    const st = h.stats;
    for (const id of [`cpu-${i}`, `events-${i}`]) {
      if (charts[id]) { charts[id].destroy(); delete charts[id]; }
      const fig = document.getElementById(id);
      fig.replaceChildren();
      fig.hidden = !st.t.length;
    }
    if (!st.t.length) return;
    const pct = (v) => (v === null ? "–" : num(v, 2) + " %");
    charts[`cpu-${i}`] = NT.chart(document.getElementById(`cpu-${i}`), {
      title: "collector CPU (% of one CPU)",
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(budget * 1.5, max)] } },
      series: [{}, { label: "process", stroke: "#0b5cad", width: 2, value: (u, v) => pct(v) },
        { label: "programs in the kernel", stroke: "#8a4baf", width: 2, value: (u, v) => pct(v) },
        { label: "whole cost", stroke: "#1b1b1b", width: 2, value: (u, v) => pct(v) },
        { label: `H4 budget ${budget} %`, stroke: "#b3261e", width: 1, dash: [6, 4], value: (u, v) => pct(v) }],
      axes: [{}, { size: 60, values: (u, vals) => vals.map((v) => v + " %") }],
    }, [st.t, st.cpu_percent, st.programs_percent, st.agent_cpu_percent, st.t.map(() => budget)]);
    charts[`events-${i}`] = NT.chart(document.getElementById(`events-${i}`), {
      title: "events read per second",
      scales: { x: { time: true } },
      series: [{}, { label: "events/s", stroke: "#1f7a3a", width: 2, value: (u, v) => (v === null ? "–" : num(v)) }],
      axes: [{}, { size: 70 }],
    }, [st.t, st.events_per_s]);
  }

  function hostPanel(h, i) {
    const s = h.status;
    const sampling = h.sampling.map((r) => el("tr", { dataset: { eventType: r.event_type } },
      el("td", {}, el("code", { text: r.event_type })), el("td", { text: r.setting }), el("td", { class: "num", text: num(r.observed) }),
      el("td", { class: "num", text: num(r.emitted) }), el("td", { class: "num", text: r.ratio === null ? "none emitted" : `1 in ${num(r.ratio, 2)}` }),
      el("td", { class: "num", text: `${num(r.window_s, 1)} s` }), el("td", { text: time(r.ts_wall) })));
    const losses = h.losses.map((l) => el("tr", {}, el("td", {}, el("code", { text: l.event_type })), el("td", { class: "num", text: num(l.lost) })));
    const alerts = h.alerts.map((a) => el("tr", { dataset: { rule: a.rule_id } },
      el("td", { text: time(a.start) }), el("td", {}, NT.sevBadge(a.severity)), el("td", { text: a.rule_id }), el("td", { text: a.status }),
      el("td", { class: "num", text: num(a.count) }), el("td", { class: "wrap", text: a.message })));
    return el("section", { class: "panel host-status", dataset: { host: h.host_id }, "aria-labelledby": `host-h-${i}` },
      el("h2", { id: `host-h-${i}`, text: `Collector on ${h.host_id}` }),
      el("p", {}, el("a", { class: "tracing-link", href: `${pd.tracing_url}?host=${encodeURIComponent(h.host_id)}`, text: "What it traces (change)" })),
      summary(h),
      el("div", { class: "grid" },
        el("section", { class: "panel", "aria-label": "Tracepoints" }, el("h3", { text: "Tracepoints (H3)" }), tracepoints(s)),
        el("section", { class: "panel", "aria-label": "Rules" }, el("h3", { text: "Rules that cannot fully fire (H3)" }), rules(s))),
      el("h3", { text: "Overhead (H4)" }),
      el("div", { class: "chart-grid" },
        el("figure", { class: "chart", id: `cpu-${i}`, "aria-label": "Collector CPU percent over time with the H4 budget" }),
        el("figure", { class: "chart", id: `events-${i}`, "aria-label": "Events read per second over time" })),
      h.stats.t.length ? null : el("p", { class: "muted", text: "No collector_stats record from this host." }),
      el("h3", { text: "Sampling (H2)" }),
      table("sampling", [["Event type"], ["Setting"], ["Observed", true], ["Emitted", true], ["Records", true], ["Window", true], ["At"]], sampling,
        "Nothing sampled: every event is recorded."),
      el("h3", { text: "Lost events (H1)" }),
      table("losses", [["Event type"], ["Lost", true]], losses, "No event lost."),
      el("h3", { text: "Self-health alerts" }),
      table("alerts", [["Start"], ["Severity"], ["Rule"], ["Status"], ["Count", true], ["Message"]], alerts, "None."));
  }

  // Scale-out only (REDIS_URL): the ingest stream and its writers (webapp/bus/health.py).
  function busPanel(b) {
    if (b.error) return [el("h2", { text: "Ingest bus" }), el("p", { class: "error", text: b.error })];
    const items = [["Stream length", num(b.length)], ["Pending", num(b.pending)],
      ["Lag", b.lag === null ? "–" : num(b.lag)], ["Redis durability", b.durability]];
    const rows = b.writers.map((w) => el("tr", { dataset: { writer: w.name } },
      el("td", { text: w.name }), el("td", { class: "num", text: num(w.records) }), el("td", { class: "num", text: num(w.batches) }),
      el("td", { class: "num", text: num(w.duplicates) }), el("td", { class: "num", text: num(w.rate) }),
      el("td", { class: "num", text: num(w.pending) })));
    return [el("h2", { text: "Ingest bus" }),
      el("dl", { class: "summary" }, ...items.map(([k, v]) => el("div", { dataset: { item: k } }, el("dt", { text: k }), el("dd", { text: v })))),
      table("writers", [["Writer"], ["Records", true], ["Batches", true], ["Duplicates", true], ["Records/s", true], ["Pending", true]],
        rows, "No writer running.")];
  }

  const fetchStatus = NT.latest();

  async function load() {
    const host = form.elements.host.value;
    const p = new URLSearchParams(host ? { host } : {});
    history.replaceState(null, "", location.pathname + (host ? "?" + p : ""));
    let d;
    try { d = await fetchStatus("/api/dash/status?" + p); } catch (e) { NT.showError(e.message); return; }
    for (const c of Object.values(charts)) c.destroy();
    for (const k of Object.keys(charts)) delete charts[k];
    const bus = document.getElementById("bus");
    bus.hidden = !d.bus;
    if (d.bus) bus.replaceChildren(...busPanel(d.bus));
    const box = document.getElementById("hosts");
    box.replaceChildren(...d.hosts.map(hostPanel));
    d.hosts.forEach((h, i) => overheadCharts(h, i, d.cpu_budget));
    document.getElementById("hosts-empty").hidden = d.hosts.length > 0;
    document.body.dataset.loaded = "1";
  }

  form.addEventListener("submit", (ev) => { ev.preventDefault(); delete document.body.dataset.loaded; load(); });
  load();
  let pending = false;
  NT.live(pd.hosts.map((h) => ({ host: h, kind: SELF_KINDS })), () => {
    if (pending) return;
    pending = true;
    setTimeout(() => { pending = false; delete document.body.dataset.loaded; load(); }, 1500);
  });
})();

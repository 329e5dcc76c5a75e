/* Counters page: per-flow IP counters from /api/dash/ip-flows (sorted on the server by
   the clicked heading, filtered by host) and the stack counters over time from
   /api/dash/stack-counters (one line per counter, every namespace summed; below, the
   sums and each namespace's latest values); refreshed when the live feed brings
   ip_flow_counters or stack_counter records. */
"use strict";

(() => {
  const { el, num, bytes, time, endpoint } = NT;
  const pd = NT.pageData;
  const form = document.getElementById("select");
  const COLORS = ["#0b5cad", "#b3261e", "#1f7a3a", "#a15c00", "#5a3fa0", "#0a7d8c", "#6b7280", "#10243b"];
  const state = { sort: pd.sort || pd.default_sort };
  let chart = null;

  function params() {
    const host = form.elements.host.value;
    return new URLSearchParams(host ? { host } : {});
  }

  function remember() {
    const p = params();
    if (state.sort !== pd.default_sort) p.set("sort", state.sort);
    history.replaceState(null, "", location.pathname + (p.toString() ? "?" + p : ""));
  }

  function markSort() {
    for (const th of document.querySelectorAll("#ip-flows th[data-sort]")) {
      const key = th.dataset.sort;
      th.setAttribute("aria-sort", state.sort === key ? "ascending" : state.sort === "-" + key ? "descending" : "none");
    }
  }

  function flowRow(f) {
    return el("tr", { dataset: { direction: f.direction } },
      el("td", { text: f.host_id }), el("td", { text: f.direction }), el("td", { text: f.protocol_name || String(f.protocol) }),
      el("td", { text: endpoint(f.src, f.sport) }), el("td", { text: endpoint(f.dst, f.dport) }),
      el("td", { class: "num", text: String(f.if_index) }),
      el("td", { class: "num", text: num(f.packets) }), el("td", { class: "num", text: bytes(f.bytes), title: `${num(f.bytes)} bytes` }),
      el("td", { text: time(f.first) }), el("td", { text: time(f.last) }));
  }

  const fetchFlows = NT.latest();
  const fetchStack = NT.latest();

  async function loadFlows() {
    const p = params();
    p.set("sort", state.sort);
    const d = await fetchFlows("/api/dash/ip-flows?" + p);
    NT.lossNote(d.losses);
    const tbody = document.querySelector("#ip-flows tbody");
    tbody.replaceChildren(...d.flows.map(flowRow));
    // Empty: per host, which provider is missing and how to enable it (empty_panels.py).
    if (!d.flows.length) {
      const why = d.empty_why.length ? d.empty_why.map((w) => w.why) : ["No IP flow counters recorded: no collector has reported yet (the ip-flows provider counts them: nettrail collect --providers tcp,ip-flows)."];
      tbody.append(...why.map((text) => el("tr", { class: "empty-why" }, el("td", { colspan: 10, class: "muted wrap", text }))));
    }
    document.getElementById("flows-total").textContent = d.total > d.flows.length ? `Showing ${num(d.flows.length)} of ${NT.count(d.total, "flow")}.` : `${NT.count(d.total, "flow")}.`;
    markSort();
  }

  function lines(tl) {
    const container = document.getElementById("chart-stack");
    if (chart) { chart.destroy(); chart = null; }
    container.replaceChildren();
    document.getElementById("stack-empty").hidden = tl.t.length > 0;
    if (!tl.t.length) return;
    const series = tl.series.map((s, i) => ({
      label: s.counter, stroke: COLORS[i % COLORS.length], width: 2, points: { show: true, size: 5 },
      dash: i >= COLORS.length ? [6, 4] : undefined,
    }));
    const opts = {
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1, max)] } },
      cursor: { drag: { x: true, y: false } },
      series: [{}, ...series],
      axes: [{}, { size: 60 }],
    };
    chart = NT.chart(container, opts, [tl.t, ...tl.series.map((s) => s.counts)]);
    NT.charts = { stack: chart }; // handy from the console and the browser tests
  }

  // A namespace as a person finds it: its inode, and its /run/netns name or the process read in it.
  function netnsLabel(c) {
    if (c.netns === null) return "–";
    const who = c.netns_name || (c.comm ? `${c.comm} (pid ${c.pid})` : "");
    return who ? `${c.netns} ${who}` : String(c.netns);
  }

  async function loadStack() {
    const d = await fetchStack("/api/dash/stack-counters?" + params());
    lines(d.timeline);
    document.querySelector("#stack-sum tbody").replaceChildren(...d.summed.map((c) => el("tr", { dataset: { counter: c.counter } },
      el("td", { text: c.host_id }), el("td", { text: c.mib }), el("td", { text: c.counter }),
      el("td", { class: "num", text: num(c.increase) }), el("td", { class: "num", text: num(c.namespaces) }),
      el("td", { class: "num", text: num(c.reports) }), el("td", { text: time(c.last) }))));
    document.querySelector("#stack tbody").replaceChildren(...d.latest.map((c) => el("tr", { dataset: { counter: c.counter, netns: String(c.netns) } },
      el("td", { text: c.host_id }), el("td", { text: netnsLabel(c) }),
      el("td", { text: c.mib }), el("td", { text: c.counter }), el("td", { class: "num", text: num(c.value) }),
      el("td", { class: "num", text: num(c.increase) }), el("td", { class: "num", text: num(c.reports) }), el("td", { text: time(c.last) }))));
  }

  async function load() {
    remember();
    try { await Promise.all([loadFlows(), loadStack()]); } catch (e) { NT.showError(e.message); return; }
    document.body.dataset.loaded = "1";
  }

  for (const th of document.querySelectorAll("#ip-flows th[data-sort]")) {
    th.querySelector("button").addEventListener("click", () => {
      const key = th.dataset.sort;
      state.sort = state.sort === "-" + key ? key : "-" + key;
      delete document.body.dataset.loaded;
      load();
    });
  }
  form.addEventListener("submit", (ev) => { ev.preventDefault(); delete document.body.dataset.loaded; load(); });
  load();
  let pending = false;
  NT.live(pd.hosts.map((h) => ({ host: h, kind: ["ip_flow_counters", "stack_counter"] })), () => {
    if (pending) return;
    pending = true;
    setTimeout(() => { pending = false; load(); }, 2000);
  });
})();

/* Buffers page: stacked drop-reason chart, breakdown tables, recent drops (selecting one
   shows its buffer lifecycle from /api/dash/skb/<uid> and its connection), and lifecycles
   of the buffers of a chosen flow or drop reason. Data: /api/dash/buffers. */
"use strict";

(() => {
  const { el, num, duration, time, endpoint } = NT;

  /* A drop's packet as its headers name it (source first; ICMP and other transports
     without ports show addresses only), or a dash when the buffer had no IP header. */
  function packet(r) {
    if (!r.src && !r.dst) return "–";
    const ported = r.l4_proto === "tcp" || r.l4_proto === "udp" || r.l4_proto === "udplite";
    const ends = `${endpoint(r.src, ported ? r.sport : null)} → ${endpoint(r.dst, ported ? r.dport : null)}`;
    return r.l4_proto ? `${r.l4_proto} ${ends}` : ends;
  }
  const pd = NT.pageData;
  const form = document.getElementById("select");
  const COLORS = ["#0b5cad", "#b3261e", "#1f7a3a", "#a15c00", "#5a3fa0", "#0a7d8c", "#6b7280", "#10243b", "#c0c4ca"];
  let chart = null;

  function params() {
    const p = new URLSearchParams();
    for (const k of ["host", "reason", "conn"]) { const v = form.elements[k].value.trim(); if (v) p.set(k, v); }
    if (form.elements.unix.checked) p.set("unix", "1");
    return p;
  }

  function stacked(tl, whyEmpty) {
    const container = document.getElementById("chart-drops");
    if (chart) { chart.destroy(); chart = null; }
    container.replaceChildren();
    const none = document.getElementById("drops-empty");
    none.hidden = tl.t.length > 0;
    // Why there is nothing: per host, its collector's providers (empty_panels.py)
    if (!tl.t.length) none.replaceChildren("No drops recorded.", ...(whyEmpty || []).map((h) => el("span", { class: "empty-why", text: ` ${h.why}` })));
    if (!tl.t.length) return;
    // Stacked bars: each reason's bar reaches the running total up to it; the tallest
    // (all reasons) is drawn first so each smaller one paints its own slice on top.
    const acc = tl.t.map(() => 0);
    const cumulative = tl.series.map((s) => s.counts.map((c, i) => (acc[i] += c)));
    const bars = uPlot.paths.bars({ size: [0.9, 40] });
    const order = tl.series.map((_, i) => i).reverse();
    const series = order.map((i) => ({
      label: tl.series[i].reason, stroke: COLORS[i % COLORS.length], fill: COLORS[i % COLORS.length], width: 0, paths: bars, points: { show: false },
      value: (u, v, si, idx) => (idx === null ? "–" : num(tl.series[i].counts[idx])),
    }));
    const opts = {
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1, max)] } },
      cursor: { drag: { x: true, y: false } },
      series: [{}, ...series],
      axes: [{}, { size: 60 }],
    };
    const data = [tl.t, ...order.map((i) => cumulative[i])];
    chart = NT.chart(container, opts, data);
  }

  function stageBar(stages) {
    const total = stages.reduce((s, x) => s + (x.since_prev_ns || 0), 0) || 1;
    return el("div", { class: "bar", role: "img", "aria-label": stages.map((s) => `${NT.stageName(s)} after ${duration((s.since_prev_ns || 0) / 1e9)}`).join(", ") },
      ...stages.map((s, i) => el("span", { title: `${NT.stageName(s)}: ${duration((s.since_prev_ns || 0) / 1e9)}`, style: { width: `${Math.max(2, 100 * (s.since_prev_ns || 0) / total)}%`, background: COLORS[i % COLORS.length] } })));
  }
  function stagesText(stages) { return stages.map((s) => `${NT.stageName(s)} +${duration((s.since_prev_ns || 0) / 1e9)}`).join(" → "); }

  function lifecycleRows(list) {
    return list.map((b) => el("tr", { dataset: { skb: b.skb_uid } },
      el("td", {}, el("button", { type: "button", class: "link", text: String(b.skb_uid), onclick: () => showSkb(b.skb_uid, b.host_id) })),
      el("td", { text: time(b.first) }),
      el("td", {}, stageBar(b.stages), el("span", { class: "muted", text: stagesText(b.stages) })),
      el("td", { class: "num", text: duration(b.total_ns / 1e9) }),
      el("td", { text: b.end || "–" })));
  }

  async function showSkb(uid, host) {
    // skb_uids are per host: name it when known, so another host's buffer never answers.
    let d;
    const on = host ? `?host=${encodeURIComponent(host)}` : "";
    try { d = await NT.fetchJSON(`/api/dash/skb/${uid}${on}`); } catch (e) { NT.showError(e.message); return; }
    const b = d.skb;
    const panel = document.getElementById("skb-panel");
    sampling("skb-sampling", d.sampling);
    const rows = b.stages.map((s) => el("tr", {}, el("td", { text: time(s.ts) }), el("td", { text: NT.stageName(s) }),
      el("td", { class: "num", text: duration((s.since_prev_ns || 0) / 1e9) }), el("td", { text: s.if_name || "–" }), el("td", { class: "num", text: num(s.len) })));
    const conn = d.conn
      ? el("p", {}, "Connection: ", el("a", { href: NT.connHref(d.conn), text: `${NT.endpoint(d.conn.src, d.conn.sport)} → ${NT.endpoint(d.conn.dst, d.conn.dport)}` }), ` (${d.conn.comm || "?"}, ${d.conn.state || "?"})`)
      : el("p", { class: "muted", text: "No connection is known for this buffer." });
    document.getElementById("skb-detail").replaceChildren(
      el("p", {}, el("strong", { text: `skb ${b.skb_uid}` }), b.drop ? ` — dropped: ${b.drop.reason} at ${b.drop.location || "?"}` : ` — ${b.end || "in flight"}`),
      conn, stageBar(b.stages),
      el("table", {}, el("thead", {}, el("tr", {}, ...["Time", "Stage", "Since previous", "Interface", "Length"].map((h) => el("th", { scope: "col", text: h })))), el("tbody", {}, ...rows)));
    panel.hidden = false;
    panel.focus();
  }

  // Next to every lifecycle view: how many of the buffers the kernel followed (--skb-sample),
  // with the exact counts of the newest report (webapp/dashboard/selfhealth.lifecycle_sampling),
  // and which stages it records (--skb-stages: with "ends", the stages not recorded are named).
  function sampling(id, list) {
    const p = document.getElementById(id);
    p.dataset.skbSample = (list || []).map((s) => s.skb_sample).join(",");
    p.dataset.skbStages = (list || []).map((s) => s.skb_stages).join(",");
    p.dataset.skbWindow = (list || []).map((s) => s.skb_window || "").join(",");
    if (!list || !list.length) {
      p.textContent = "No host runs skb-lifecycle: lifecycles need `nettrail collect --providers …,skb-lifecycle --skb-sample N` (with nettrail up: NETTRAIL_SKB_SAMPLE=N).";
      return;
    }
    p.textContent = "Sampling: " + list.map((s) => {
      const ratio = s.skb_sample > 1 ? `1 buffer in ${num(s.skb_sample)} followed` : "every buffer followed";
      const during = s.last && s.last.open_s != null ? ` in ${num(s.last.open_s, 1)} s of windows` : "";
      const last = s.last ? ` (last report: ${num(s.last.observed)} buffers seen${during}, ${num(s.last.emitted)} followed)` : "";
      const stages = s.stages_note ? ` ${s.stages_note}` : " Every stage recorded.";
      const windows = s.window_note ? ` ${s.window_note}` : "";
      return `${s.host_id}: ${ratio}${last}.${windows}${stages}`;
    }).join(" ");
  }

  /* Unix-socket drops (a browser closing its sockets) are left out unless ticked: say how
     many, so an empty or quiet page is not mistaken for no drops at all. */
  function unixNote(u) {
    const note = document.getElementById("unix-note");
    note.dataset.drops = String(u.drops);
    note.textContent = u.included
      ? `Unix-socket drops included (${NT.count(u.drops, "drop event")}).`
      : u.drops ? `${NT.count(u.drops, "drop event")} of unix sockets left out.` : "";
  }

  const fetchBuffers = NT.latest();

  async function load() {
    const p = params();
    history.replaceState(null, "", location.pathname + (p.toString() ? "?" + p : ""));
    let d;
    try { d = await fetchBuffers("/api/dash/buffers?" + p); } catch (e) { NT.showError(e.message); return; }
    NT.lossNote(d.losses);
    const reason = form.elements.reason;
    const chosen = reason.value || pd.reason;
    reason.replaceChildren(el("option", { value: "", text: "any" }), ...d.reasons.map((r) => el("option", { value: r, text: r, selected: r === chosen })));
    stacked(d.timeline, d.empty_why);
    unixNote(d.unix);
    document.querySelector("#by-location tbody").replaceChildren(...d.by_location.map((r) => el("tr", {},
      el("td", { class: "trunc", title: r.drop_reason_str, text: r.drop_reason_str }),
      el("td", { class: "trunc", title: r.drop_location || "", text: r.drop_location || "–" }), el("td", { class: "num", text: num(r.n) }))));
    document.querySelector("#by-process tbody").replaceChildren(...d.by_process.map((r) => el("tr", {},
      el("td", { text: r.comm || "(kernel / unknown)" }), el("td", { class: "num", text: r.tgid ?? "–" }), el("td", { class: "num", text: num(r.n) }))));
    document.querySelector("#exact tbody").replaceChildren(...d.exact.map((r) => el("tr", {},
      el("td", { class: "trunc", title: r.host_id, text: r.host_id }), el("td", { class: "trunc", title: r.drop_reason_str, text: r.drop_reason_str }),
      el("td", { class: "trunc", title: r.drop_location || "", text: r.drop_location || "–" }), el("td", { class: "num", text: num(r.total) }))));
    document.querySelector("#recent tbody").replaceChildren(...d.recent.map((r) => {
      const tr = el("tr", { tabindex: 0, dataset: { skb: r.skb_uid ?? "" } },
        el("td", { text: time(r.ts_wall) }), el("td", { text: r.host_id }), el("td", { text: r.drop_reason_str }),
        el("td", { class: "trunc", title: packet(r), text: packet(r) }), el("td", { text: r.drop_location || "–" }), el("td", { class: "num", text: num(r.len) }),
        el("td", { text: r.comm ? `${r.comm} (${r.tgid ?? "?"})` : "–" }),
        el("td", {}, r.conn_uuid ? el("a", { href: NT.connHref(r), text: r.conn_uuid.slice(0, 8), title: r.matched === "addresses" ? "matched by the packet's addresses and ports (no socket held it)" : null }) : "–"));
      if (r.skb_uid !== null) {
        tr.addEventListener("click", (ev) => { if (!ev.target.closest("a")) showSkb(r.skb_uid, r.host_id); });
        tr.addEventListener("keydown", (ev) => { if (ev.key === "Enter") showSkb(r.skb_uid, r.host_id); });
        return tr;
      }
      // No buffer identity (a sampled drop event): the row opens its connection if it has
      // one, and otherwise does not pretend to be clickable.
      if (r.conn_uuid) return NT.linkRow(tr, NT.connHref(r));
      tr.removeAttribute("tabindex");
      return tr;
    }));
    document.querySelector("#lifecycles tbody").replaceChildren(...lifecycleRows(d.lifecycles));
    document.getElementById("life-empty").hidden = d.lifecycles.length > 0;
    sampling("life-sampling", d.sampling);
    document.body.dataset.loaded = "1";
  }

  form.addEventListener("submit", (ev) => { ev.preventDefault(); load(); });
  form.elements.unix.checked = new URLSearchParams(location.search).get("unix") === "1";
  form.elements.unix.addEventListener("change", load);
  if (pd.reason) form.elements.reason.append(el("option", { value: pd.reason, text: pd.reason, selected: true }));
  load();
  if (pd.skb) showSkb(pd.skb);
  let pending = false;
  NT.live(pd.hosts.map((h) => ({ host: h, kind: ["skb_drop", "drop_count"] })), () => {
    if (pending) return;
    pending = true;
    setTimeout(() => { pending = false; load(); }, 2000);
  });
})();

/* Overview page: host counters, latest alerts, top talkers, TIME_WAIT by destination from /api/dash/overview.
   Every batch the live websocket pushes triggers a refresh (at most one per second), and a
   slow timer refreshes anyway so rates fall back to zero when a host goes quiet. */
"use strict";

(() => {
  const { el, num, bytes, time, endpoint } = NT;
  let pending = false;
  let last = 0;

  function connCell(c) {
    const a = el("a", { href: NT.connHref(c), text: `${endpoint(c.src, c.sport)} → ${endpoint(c.dst, c.dport)}` });
    return el("td", { class: "wrap" }, a, el("span", { class: "muted", text: ` ${c.host_id}` }));
  }
  function proc(c) { return c.comm ? `${c.comm} (${c.pid ?? "?"})` : "–"; }

  function render(data) {
    const hosts = document.querySelector("#hosts tbody");
    hosts.replaceChildren(...data.hosts.map((h) => el("tr", { dataset: { host: h.host_id } },
      el("th", { scope: "row" }, el("a", { href: `/connections/?q=${encodeURIComponent("host " + h.host_id)}`, text: h.host_id })),
      el("td", { class: "num", dataset: { counter: "open" }, text: num(h.open) }),
      el("td", { class: "num", dataset: { counter: "new" }, text: num(h.new_per_s, 1) }),
      el("td", { class: "num", dataset: { counter: "retrans" }, text: num(h.retrans_segs_per_s, 1) }),
      el("td", { class: "num", dataset: { counter: "drops" }, text: num(h.drops_per_s, 1) }),
      el("td", { class: "wrap", text: h.top_drop_reasons.map((r) => `${r.reason} ${num(r.per_s, 1)}/s`).join(", ") || "–" }),
      el("td", { class: "num", dataset: { counter: "records" }, text: num(h.records_per_s, 1) }),
      el("td", { class: "num", dataset: { counter: "lost" }, text: num(h.lost) }),
      el("td", { text: time(h.last_seen) }),
    )));
    if (!data.hosts.length) hosts.append(el("tr", {}, el("td", { colspan: 9, class: "muted", text: "No host has sent records yet." })));

    document.querySelector("#latest-alerts tbody").replaceChildren(...data.alerts.map((a) => el("tr", {},
      el("td", { text: time(a.start) }), el("td", {}, NT.sevBadge(a.severity)), el("td", {}, el("a", { class: "rule", href: NT.alertHref(a), text: a.rule_id })),
      el("td", { text: a.host_id }),
      el("td", { class: "msg" }, el("a", { class: "clamp", title: a.message, href: a.conn_uuid && !a.members ? NT.connHref(a) : NT.alertHref(a), text: a.message }),
        // a grouped finding: its member sockets are listed on the Alerts page (issue 34)
        a.members ? el("span", { class: "muted", text: ` · ${a.members} socket${a.members > 1 ? "s" : ""}` }) : null,
        a.status === "closed" ? el("span", { class: "muted", text: " · closed" }) : null),
    )));
    if (!data.alerts.length) document.querySelector("#latest-alerts tbody").append(el("tr", {}, el("td", { colspan: 5, class: "muted", text: "No alert fired on a live host." })));
    document.querySelector("#top-bytes tbody").replaceChildren(...data.top_bytes.map((c) => el("tr", {},
      connCell(c), el("td", { text: proc(c) }), el("td", { class: "num", text: bytes(c.bytes) }))));
    document.querySelector("#top-retrans tbody").replaceChildren(...data.top_retrans.map((c) => el("tr", {},
      connCell(c), el("td", { text: proc(c) }), el("td", { class: "num", text: num(c.retrans) }))));
    const tw = document.querySelector("#time-wait tbody");
    tw.replaceChildren(...data.time_wait.map((r) => el("tr", { dataset: { host: r.host_id, dst: endpoint(r.dst, r.dport) } },
      el("td", { class: "wrap", text: r.host_id }),
      el("td", {}, el("a", { href: `/connections/?q=${encodeURIComponent(r.q)}`, text: endpoint(r.dst, r.dport) })),
      el("td", { class: "num", text: num(r.sockets) }))));
    if (!data.time_wait.length) tw.append(el("tr", {}, el("td", { colspan: 3, class: "muted", text: "No socket in TIME_WAIT." })));
  }

  const kinds = ["connection", "tcp_state", "tcp_retransmit", "skb_drop", "drop_count", "loss_report", "alert"];
  let feed = null;
  const fetchOverview = NT.latest(); // a slow refresh must not land after a newer one

  async function refresh() {
    pending = false;
    last = performance.now();
    try {
      const data = await fetchOverview("/api/dash/overview");
      render(data);
      for (const h of data.hosts) feed.add({ host: h.host_id, kind: kinds });
    } catch (e) { NT.showError(e.message); }
  }
  function soon() {
    if (pending) return;
    pending = true;
    setTimeout(refresh, Math.max(0, 1000 - (performance.now() - last)));
  }

  feed = NT.live(NT.pageData.hosts.map((h) => ({ host: h, kind: kinds })), soon);
  refresh();
  setInterval(soon, 5000);
})();

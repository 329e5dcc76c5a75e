/* UDP flows page: datagrams grouped per host, 4-tuple and process, plus socket events,
   from /api/dash/udp; refreshed when the live feed brings UDP records. */
"use strict";

(() => {
  const { el, num, bytes, time, endpoint } = NT;
  const form = document.getElementById("select");

  const fetchFlows = NT.latest();

  // the address and port filter (either end of a datagram), kept in the URL
  const initial = new URLSearchParams(location.search);
  for (const k of ["addr", "port"]) form.elements[k].value = initial.get(k) || "";

  async function load() {
    const p = new URLSearchParams();
    for (const k of ["host", "addr", "port"]) { const v = form.elements[k].value.trim(); if (v) p.set(k, v); }
    history.replaceState(null, "", location.pathname + (p.toString() ? "?" + p : ""));
    let d;
    try { d = await fetchFlows("/api/dash/udp?" + p); } catch (e) { NT.showError(e.message); return; }
    NT.lossNote(d.losses);
    // what a host's collector says its udp provider cannot give there (collector_status
    // degraded): a null destination or a missing record is then explained, not a mystery
    NT.pageNote("udp-degraded", "What the collectors cannot record", "What the collectors cannot record here:",
      (d.degraded || []).map((i) => [i.host_id, `${i.provider} ${i.what}: ${i.why}`]));
    const tbody = document.querySelector("#flows tbody");
    tbody.replaceChildren(...d.flows.map((f) => {
      const tr = el("tr", {},
        el("td", { text: f.host_id }),
        el("td", {}, f.conn_uuid ? el("a", { href: NT.connHref(f), text: endpoint(f.src, f.sport) }) : endpoint(f.src, f.sport)),
        el("td", { text: endpoint(f.dst, f.dport) }), el("td", { text: f.comm || "–" }),
        el("td", { class: "num", text: num(f.datagrams) }), el("td", { class: "num", text: bytes(f.bytes) }),
        el("td", { class: "num", text: num(f.errors), title: f.rcvbuf_drops ? `${num(f.rcvbuf_drops)} refused by a full receive buffer` : null }), el("td", { class: "num", text: num(f.icmp_errors) }),
        el("td", { text: time(f.first) }), el("td", { text: time(f.last) }));
      return f.conn_uuid ? NT.linkRow(tr, NT.connHref(f)) : tr;
    }));
    if (!d.flows.length && (p.get("addr") || p.get("port"))) {
      tbody.append(el("tr", {}, el("td", { colspan: 10, class: "muted wrap", id: "udp-empty", text: "No UDP datagrams with that address or port." })));
    } else if (!d.flows.length) {
      // Say why the table is empty when a collector runs neither udp nor udp-calls.
      const off = (d.provider_off || []).map((h) => `${h.host_id} (runs ${h.providers.join(", ") || "none"})`);
      const why = off.length
        ? ` The udp provider is not enabled on ${off.join("; ")}: add udp-calls (its always-on mode: every send and receive call, with its peer) or udp (also every packet at the device, costly) to the collector's --providers (nettrail collect --providers tcp,udp-calls,…; nettrail up: NETTRAIL_PROVIDERS=tcp,udp-calls,…), or on the dashboard: Status, What it traces (staff; followed by a collector run with --providers-from-server, as nettrail up's is), to record UDP datagrams.`
        : "";
      tbody.append(el("tr", {}, el("td", { colspan: 10, class: "muted wrap", id: "udp-empty", text: "No UDP datagrams recorded." + why })));
    }
    document.querySelector("#sock tbody").replaceChildren(...d.socket_events.map((s) => el("tr", {},
      el("td", { text: s.host_id }), el("td", { text: s.probe }), el("td", { text: endpoint(s.src, s.sport) }),
      el("td", { text: s.comm || "–" }), el("td", { class: "num", text: num(s.events) }), el("td", { text: time(s.last) }))));
    document.body.dataset.loaded = "1";
  }

  form.addEventListener("submit", (ev) => { ev.preventDefault(); load(); });
  load();
  let pending = false;
  NT.live(NT.pageData.hosts.map((h) => ({ host: h, kind: ["udp_datagram", "sock_event"] })), () => {
    if (pending) return;
    pending = true;
    setTimeout(() => { pending = false; load(); }, 2000);
  });
})();

/* Alerts page: list from /api/dash/alerts filtered by severity/rule/host/acknowledged,
   acknowledge (POST /api/dash/alerts/<id>/ack), evidence records and the connection. New
   alerts arrive over the live feed's alert stream and reload the list. */
"use strict";

(() => {
  const { el, num, time } = NT;
  const pd = NT.pageData;
  const form = document.getElementById("filters");

  function options(select, values, chosen) {
    const keep = select.value || chosen;
    select.replaceChildren(el("option", { value: "", text: "any" }), ...values.map((v) => el("option", { value: v, text: v, selected: v === keep })));
  }

  /* who acknowledged, and when: on narrow screens the stamp goes under the name, whole */
  function acked(a) {
    return el("span", { class: "acked" }, `${a.acked_by}, `, el("span", { class: "nowrap", text: NT.datetime(a.acked_at) }));
  }

  async function acknowledge(id, button) {
    button.disabled = true;
    try {
      const a = await NT.fetchJSON(`/api/dash/alerts/${id}/ack`, { method: "POST" });
      button.replaceWith(acked(a));
    } catch (e) {
      button.disabled = false;
      NT.showError(e.message);
    }
  }

  async function evidence(id) {
    let d;
    try { d = await NT.fetchJSON(`/api/dash/alerts/${id}/evidence`); } catch (e) { NT.showError(e.message); return; }
    document.querySelector("#evidence tbody").replaceChildren(...(d.records.length ? d.records.map((r) => el("tr", {},
      el("td", { class: "num", text: r.seq }), el("td", { text: r.kind }), el("td", { text: time(r.ts_wall) }), el("td", { text: r.probe }),
      el("td", {}, r.conn_uuid ? el("a", { href: NT.connHref(r), text: r.conn_uuid.slice(0, 8) }) : "–")))
      : [el("tr", {}, el("td", { colspan: 5, class: "muted", text: `Evidence seqs ${d.evidence.join(", ") || "none"}: no stored records match.` }))]));
    const panel = document.getElementById("evidence-panel");
    panel.hidden = false;
    panel.focus();
  }

  /* The row's message and count are the newest version's (the current numbers, replaced
     live as versions arrive); this line says how the alert started and its worst. */
  // The metric's unit depends on the rule (docs/alerts.md), so it is named as the metric;
  // the count is how often the condition fired.
  function value(v) {
    const fired = `(fired ${NT.count(v.count, "time")})`;
    return v.metric === null || v.metric === undefined ? fired : `metric ${Number(v.metric.toPrecision(4))} ${fired}`;
  }
  function versions(a) {
    if (!a.first || a.versions < 2) return null;
    return el("div", { class: "versions muted", dataset: { versions: a.versions } },
      el("span", { class: "first", title: a.first.message, text: `first ${value(a.first)} at ${time(a.first.ts)}` }), " · ",
      el("span", { class: "worst", title: a.worst.message, text: `worst ${value(a.worst)} at ${time(a.worst.ts)}` }), " · ",
      el("span", { text: NT.count(a.versions, "version") }));
  }

  /* A grouped finding (one cause, many sockets: docs/alerts.md "Grouping") links each of
     its first member sockets' connection pages, where the per-socket detail is. */
  function members(a) {
    if (!a.members) return null;
    const links = (a.member_conn_uuids || []).map((uuid) => el("a", { class: "member", href: NT.connHref({ conn_uuid: uuid, host_id: a.host_id }), text: uuid.slice(0, 8) }));
    const more = a.members > links.length ? ` and ${num(a.members - links.length)} more` : "";
    return el("div", { class: "members muted", dataset: { members: a.members } },
      `${NT.count(a.members, "socket")}: `, ...links.flatMap((l, i) => (i ? [" ", l] : [l])), more);
  }

  const fetchAlerts = NT.latest();

  /* The rule and host lists are filled from the first answer, so on the first load the
     URL's choice (page data) is what the select would hold: without it ?host=H listed
     every host's alerts. */
  let first = true;
  async function load() {
    const p = new URLSearchParams();
    for (const k of ["severity", "rule", "host", "acked"]) {
      const v = form.elements[k].value || (first ? pd[k] : "");
      if (v) p.set(k, v);
    }
    if (form.elements.own.checked) p.set("own", "1");
    first = false;
    history.replaceState(null, "", location.pathname + (p.toString() ? "?" + p : "") + location.hash);
    let d;
    try { d = await fetchAlerts("/api/dash/alerts?" + p); } catch (e) { NT.showError(e.message); return; }
    options(form.elements.rule, d.rules, pd.rule);
    options(form.elements.host, d.hosts, pd.host);
    document.getElementById("count").textContent = NT.count(d.alerts.length, "alert");
    document.querySelector("#alerts tbody").replaceChildren(...d.alerts.map((a) => el("tr", { id: `alert-${a.id}`, dataset: { id: a.id } },
      stampCell(a.start),
      el("td", {}, NT.sevBadge(a.severity)), el("td", { text: a.rule_id }),
      el("td", { class: "trunc", title: a.host_id, text: a.host_id }), el("td", { class: "status", text: status(a) }), el("td", { class: "num count", text: num(a.count) }),
      el("td", { class: "msg" }, a.conn_uuid
        ? el("a", { class: "clamp", title: a.message, href: NT.connHref(a), text: a.message })
        : el("span", { class: "clamp", title: a.message, text: a.message }), versions(a), members(a)),
      el("td", {}, el("button", { type: "button", class: "evidence", text: NT.count(a.evidence.length, "record"), onclick: () => evidence(a.id) })),
      el("td", {}, a.acked_by
        ? acked(a)
        : el("button", { type: "button", class: "ack", "aria-label": `Acknowledge alert ${a.rule_id} ${a.id}`, text: "Acknowledge", onclick: (ev) => acknowledge(a.id, ev.currentTarget) })))));
    target();
    document.body.dataset.loaded = "1";
  }

  /* A link to one finding (#alert-ID, from the Overview or a connection page) marks its row
     and brings it into view; its message is shown whole there. */
  function target() {
    const row = location.hash.startsWith("#alert-") ? document.getElementById(location.hash.slice(1)) : null;
    if (!row) return;
    row.classList.add("target");
    row.scrollIntoView({ block: "center" });
  }

  /* The start stamp breaks between date and time on narrow screens; the space stays in the
     text (two inline-blocks each ending in a space read "2026-12-0721:02:51"). */
  function stampCell(epoch) {
    const [date, clock] = NT.datetime(epoch).split(" ");
    return el("td", { class: "stamp" }, el("span", { class: "nowrap", text: date }), " ", el("span", { class: "nowrap", text: clock || "" }));
  }

  // An open alert whose collector stopped or restarted since its last version: no engine follows it now.
  function status(a) {
    return a.unfollowed_since ? `open, not followed since the collector ${a.unfollowed_because} ${NT.datetime(a.unfollowed_since)}` : a.status;
  }

  form.addEventListener("submit", (ev) => { ev.preventDefault(); load(); });
  form.elements.own.addEventListener("change", load);
  load();
  let pending = false;
  NT.live([{ alerts: true }], () => {
    if (pending) return;
    pending = true;
    setTimeout(() => { pending = false; load(); }, 1000);
  });
})();

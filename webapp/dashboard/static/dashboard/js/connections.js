/* Connections page: the table from /api/dash/connections (filter language q, sort, cursor
   pages), kept live by the websocket: unknown connections are fetched (only those matching
   the filter come back) and inserted on the first page; known rows update state, bytes and
   retransmits in place. A connection traced at both ends is one row (the server pairs the
   rows of each page or live batch: webapp/dashboard/stitch_match.py) with a "both ends"
   link; records of the folded end are not new rows. Keep column keys in sync with views.CONNECTION_COLUMNS. */
"use strict";

(() => {
  /* A LISTEN row's accept queue as ss -ltn shows it (Recv-Q of Send-Q), when the collector read it. */
  function listenQueue(c) {
    const q = c.listen_queue;
    if (c.state !== "LISTEN" || !q) return null;
    return NT.el("span", { class: q.full ? "listen-queue full" : "listen-queue", title: `ss -ltn: Recv-Q ${q.queue}, Send-Q ${q.backlog} (read ${NT.time(q.at)})`,
      text: ` · queue ${NT.num(q.queue)} of ${NT.num(q.backlog)}${q.full ? ", full" : ""}` });
  }
  const { el, num, bytes, duration, endpoint } = NT;
  const params = new URLSearchParams(location.search);
  const state = {
    q: params.get("q") || "",
    own: params.get("own") === "1", // show nettrail's own connections (own_traffic.py)
    sort: params.get("sort") || NT.pageData.default_sort,
    limit: Number(params.get("limit") || NT.pageData.limit),
    cursors: [null], // cursor of each page visited; last = current page
    next: null,
  };
  const tbody = document.querySelector("#conns tbody");
  const input = document.getElementById("q");
  const errorBox = document.getElementById("q-error");
  const hintBox = document.getElementById("q-hint");
  const fetchPage = NT.latest();
  const liveKinds = ["tcp_state", "connection", "tcp_retransmit", "tcp_reset", "flow_counters", "alert"];

  function row(c) {
    // Every cell names its column (data-col): the style sheet collapses the secondary
    // ones on narrow screens, and live updates find the cells they change.
    const local = endpoint(c.src, c.sport), remote = endpoint(c.dst, c.dport);
    const tr = el("tr", { dataset: { uuid: c.conn_uuid } },
      el("td", { class: "trunc", title: c.host_id, dataset: { col: "host" }, text: c.host_id }),
      el("td", { dataset: { col: "proto" }, text: c.proto || "–" }),
      el("td", { class: "trunc", title: c.comm || "", dataset: { col: "comm" }, text: c.comm || "–" }),
      el("td", { class: "num", dataset: { col: "pid" }, text: c.pid ?? "–" }),
      el("td", { class: "num", dataset: { col: "uid" }, text: c.uid ?? "–" }),
      el("td", { class: "trunc addr", title: local, dataset: { col: "local" } }, el("a", { href: NT.connHref(c), text: local })),
      // Both ends traced (stitch_match.fold): this is the opener's row; the badge opens the other end's.
      el("td", { class: "trunc addr", title: remote, dataset: { col: "remote" } }, remote, c.peer
        ? el("a", { class: "badge both-ends", href: c.peer.url, title: `both ends traced: the other end is ${c.peer.host_id}'s row`, text: "both ends" })
        : null),
      el("td", { dataset: { col: "state" } }, c.state || !c.conn_state
        ? el("span", { class: `state-${c.state}`, text: c.state || "–" }, listenQueue(c))
        : el("span", { class: "zeek-state", title: `Zeek conn_state of the capture's summary; history ${c.history || "–"}`, text: `${c.conn_state} (${c.history || "–"})` })),
      el("td", { dataset: { col: "start" }, text: NT.time(c.start) }),
      el("td", { dataset: { col: "last" }, text: NT.time(c.last) }),
      el("td", { class: "num", dataset: { col: "duration" }, text: NT.connDuration(c) }),
      el("td", { class: "num", dataset: { col: "bytes" }, text: bytes(c.bytes) }),
      el("td", { class: "num", dataset: { col: "retrans" }, text: num(c.retrans) }),
      el("td", { dataset: { col: "alerts" } }, c.alerts ? el("span", { class: "badge sev-warning", text: `${c.alerts} (${c.alert_rules.join(",")})` }) : "–"),
    );
    if (c.peer) tr.dataset.peer = c.peer.conn_uuid; // the other end, folded into this row
    return NT.linkRow(tr, NT.connHref(c));
  }

  function query(extra = {}) {
    const p = new URLSearchParams({ q: state.q, sort: state.sort, limit: state.limit });
    if (state.own) p.set("own", "1");
    for (const [k, v] of Object.entries(extra)) if (v) p.set(k, v);
    return "/api/dash/connections?" + p.toString();
  }

  function syncUrl() {
    const p = new URLSearchParams();
    if (state.q) p.set("q", state.q);
    if (state.own) p.set("own", "1");
    if (state.sort !== NT.pageData.default_sort) p.set("sort", state.sort);
    if (state.limit !== NT.pageData.limit) p.set("limit", state.limit);
    history.replaceState(null, "", location.pathname + (p.toString() ? "?" + p : ""));
  }

  function markSort() {
    for (const th of document.querySelectorAll("#conns th[data-sort]")) {
      const key = th.dataset.sort;
      th.setAttribute("aria-sort", state.sort === key ? "ascending" : state.sort === "-" + key ? "descending" : "none");
    }
  }

  async function load() {
    syncUrl();
    markSort();
    const cursor = state.cursors[state.cursors.length - 1];
    let data;
    try {
      data = await fetchPage(query({ cursor }));
    } catch (e) {
      if (e.status === 400) {
        hintBox.hidden = true;
        errorBox.textContent = e.message;
        errorBox.hidden = false;
        input.setAttribute("aria-invalid", "true");
        tbody.replaceChildren();
        return;
      }
      NT.showError(e.message);
      return;
    }
    errorBox.hidden = true;
    input.removeAttribute("aria-invalid");
    NT.lossNote(data.losses);
    // A filter that found nothing says why when a near miss exists (comm ~ iperf).
    hintBox.textContent = (data.hints || []).join(" · ");
    hintBox.hidden = !hintBox.textContent;
    tbody.replaceChildren(...data.rows.map(row));
    for (const h of data.hosts) feed.add({ host: h, kind: liveKinds });
    state.next = data.next;
    document.getElementById("total").textContent = num(data.total);
    document.getElementById("total-noun").textContent = NT.plural(data.total, "connection");
    // Rows of this page whose other end is shown ("both ends") are left out; the total counts them.
    const folded = data.folded ? `, ${num(data.folded)} folded into their other end's row (both ends traced)` : "";
    document.getElementById("next").disabled = !data.next;
    document.getElementById("first").disabled = state.cursors.length === 1;
    const page = state.cursors.length;
    document.getElementById("page-info").textContent = `page ${page}, ${NT.count(data.rows.length, "row")}${folded}, ${data.elapsed_ms} ms`;
  }

  /* --- live updates --------------------------------------------------------- */
  const unknown = new Set();
  let fetching = false;

  function applyToRow(tr, r) {
    if (r.ts_wall) tr.querySelector('[data-col="last"]').textContent = NT.time(r.ts_wall);
    if (r.kind === "tcp_state") {
      tr.querySelector('[data-col="state"]').replaceChildren(el("span", { class: `state-${r.state}`, text: r.state }));
    } else if (r.kind === "connection") {
      if (r.state) tr.querySelector('[data-col="state"]').replaceChildren(el("span", { class: `state-${r.state}`, text: r.state }));
      if (r.duration !== null && r.duration !== undefined) tr.querySelector('[data-col="duration"]').textContent = duration(r.duration);
      tr.querySelector('[data-col="bytes"]').textContent = bytes((r.bytes_orig || 0) + (r.bytes_resp || 0));
      if (r.total_retrans !== null && r.total_retrans !== undefined) tr.querySelector('[data-col="retrans"]').textContent = num(r.total_retrans);
    } else if (r.kind === "tcp_retransmit") {
      const cell = tr.querySelector('[data-col="retrans"]');
      const n = Number(cell.textContent.replace(/,/g, "")) || 0;
      cell.textContent = num(n + 1);
    } else if (r.kind === "alert") {
      tr.querySelector('[data-col="alerts"]').replaceChildren(el("span", { class: "badge sev-warning", text: r.rule_id }));
    }
  }

  async function fetchUnknown() {
    if (fetching || !unknown.size) return;
    fetching = true;
    const uuids = [...unknown].slice(0, 50);
    uuids.forEach((u) => unknown.delete(u));
    try {
      const data = await NT.fetchJSON(query({ uuids: uuids.join(",") }));
      for (const c of data.rows.reverse()) {
        if (tbody.querySelector(`tr[data-uuid="${c.conn_uuid}"]`)) continue;
        const tr = row(c);
        tr.classList.add("new");
        tbody.prepend(tr);
        while (tbody.children.length > state.limit) tbody.lastElementChild.remove();
      }
      if (data.rows.length) {
        const total = document.getElementById("total");
        // folded: ends shown in their other end's row still count, as on a page load
        const n = (Number(total.textContent.replace(/,/g, "")) || 0) + data.rows.length + (data.folded || 0);
        total.textContent = num(n);
        document.getElementById("total-noun").textContent = NT.plural(n, "connection");
        document.getElementById("page-info").textContent = `page 1, ${NT.count(tbody.children.length, "row")}, live`;
      }
    } catch (e) {
      NT.showError(e.message);
    } finally {
      fetching = false;
      if (unknown.size) setTimeout(fetchUnknown, 200);
    }
  }

  function onRecords(records) {
    const onFirstPage = state.cursors.length === 1;
    for (const r of records) {
      if (!r.conn_uuid) continue;
      const tr = tbody.querySelector(`tr[data-uuid="${r.conn_uuid}"]`);
      if (tr) applyToRow(tr, r);
      // The other end of a row shown for both: its records do not make it a row of its own.
      else if (tbody.querySelector(`tr[data-peer="${r.conn_uuid}"]`)) continue;
      else if (onFirstPage && r.kind !== "alert") unknown.add(r.conn_uuid);
    }
    fetchUnknown();
  }

  /* --- controls ------------------------------------------------------------- */
  document.getElementById("search").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.q = input.value.trim();
    state.limit = Number(document.getElementById("page-size").value);
    state.cursors = [null];
    load();
  });
  const ownBox = document.getElementById("own");
  ownBox.checked = state.own;
  ownBox.addEventListener("change", () => {
    state.own = ownBox.checked;
    state.cursors = [null];
    load();
  });
  document.getElementById("clear").addEventListener("click", () => {
    input.value = "";
    state.q = "";
    state.cursors = [null];
    load();
  });
  document.getElementById("next").addEventListener("click", () => {
    if (!state.next) return;
    state.cursors.push(state.next);
    load();
  });
  document.getElementById("first").addEventListener("click", () => { state.cursors = [null]; load(); });
  for (const th of document.querySelectorAll("#conns th[data-sort]")) {
    th.querySelector("button").addEventListener("click", () => {
      const key = th.dataset.sort;
      state.sort = state.sort === "-" + key ? key : "-" + key;
      state.cursors = [null];
      load();
    });
  }

  const feed = NT.live(NT.pageData.hosts.map((h) => ({ host: h, kind: liveKinds })), onRecords);
  load();
})();

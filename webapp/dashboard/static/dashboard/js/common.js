/* Shared helpers for every dashboard page: JSON fetch with CSRF, the live websocket
   (/ws/live/, contract: {"subscribe": {...}} in, {"type": "records", "records": [...]} and
   {"type": "gap", "missed": N} out; docs/api.md),
   DOM building, number/time formatting and a uPlot wrapper. Plain script, no build step:
   exposes one global, NT. Keep in sync with webapp/dashboard/views.py (page_data) and
   the read-API websocket consumer. */
"use strict";

const NT = (() => {
  const pageData = JSON.parse(document.getElementById("page-data").textContent || "{}");

  function showError(message) {
    const box = document.getElementById("error");
    box.textContent = message;
    box.hidden = false;
    clearTimeout(showError.timer);
    showError.timer = setTimeout(() => { box.hidden = true; }, 8000);
  }

  async function fetchJSON(url, options = {}) {
    const opts = Object.assign({ credentials: "same-origin", headers: {} }, options);
    opts.headers = Object.assign({ Accept: "application/json" }, opts.headers);
    if (opts.method && opts.method !== "GET") opts.headers["X-CSRFToken"] = document.querySelector('meta[name="csrf-token"]').content;
    const resp = await fetch(url, opts);
    let body = null;
    try { body = await resp.json(); } catch (e) { body = null; }
    if (!resp.ok) {
      const err = new Error((body && body.error) || `${resp.status} ${resp.statusText}`);
      err.status = resp.status;
      throw err;
    }
    return body;
  }

  /* A fetchJSON for a page's reloads: once a newer call of the same fetcher has started,
     an older call's response (or error) is dropped, its promise left pending. Otherwise a
     slow earlier response (say the unfiltered first load) could land last and overwrite
     the newer filter's table or its error. */
  function latest() {
    let newest = 0;
    return async (url, options) => {
      const mine = ++newest;
      try {
        const body = await fetchJSON(url, options);
        if (mine === newest) return body;
      } catch (e) {
        if (mine === newest) throw e;
      }
      return new Promise(() => {});
    };
  }

  /* el("td", {class: "num", text: "3"}, child...) */
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") node.textContent = v;
      else if (k === "class") node.className = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else if (k === "dataset") Object.assign(node.dataset, v);
      // Through the CSSOM: a style attribute would be inline style, which the CSP blocks.
      else if (k === "style") Object.assign(node.style, v);
      else node.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children) if (c !== null && c !== undefined) node.append(c);
    return node;
  }

  const dash = "–";
  function num(v, digits = 0) {
    if (v === null || v === undefined || Number.isNaN(v)) return dash;
    return Number(v).toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
  }
  function bytes(v) {
    if (v === null || v === undefined) return dash;
    const units = ["B", "kB", "MB", "GB", "TB"];
    let i = 0;
    let x = Number(v);
    while (x >= 1000 && i < units.length - 1) { x /= 1000; i += 1; }
    return (i === 0 ? x.toFixed(0) : x.toFixed(1)) + " " + units[i];
  }
  function duration(seconds) {
    if (seconds === null || seconds === undefined) return dash;
    const s = Number(seconds);
    if (s < 0.001) return (s * 1e6).toFixed(0) + " µs";
    if (s < 1) return (s * 1000).toFixed(1) + " ms";
    if (s < 120) return s.toFixed(2) + " s";
    if (s < 7200) return (s / 60).toFixed(1) + " min";
    return (s / 3600).toFixed(1) + " h";
  }
  /* One time format everywhere (issue 18 item 8): 24-hour local time, with the date
     where it changes. time() is a table cell's clock time, datetime() the full stamp,
     stamps() a column's cells (the date shown on the first row not of today and where
     the day changes), axisTime() uPlot's x-axis ticks (date on the first tick and where
     the day changes). */
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  const day = (d) => `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
  const clock = (d) => `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  function time(epoch) {
    if (!epoch) return dash;
    const d = new Date(epoch * 1000);
    return clock(d) + "." + pad(d.getMilliseconds(), 3);
  }
  function datetime(epoch) {
    if (!epoch) return dash;
    const d = new Date(epoch * 1000);
    return `${day(d)} ${clock(d)}`;
  }
  function stamps(epochs) {
    let prev = day(new Date());
    return epochs.map((e) => {
      if (!e) return dash;
      const dd = day(new Date(e * 1000));
      const out = dd === prev ? time(e) : `${dd} ${time(e)}`;
      prev = dd;
      return out;
    });
  }
  function axisTime(u, splits) {
    let prev = null;
    return splits.map((v) => {
      if (v === null || v === undefined) return "";
      const d = new Date(v * 1000);
      const dd = day(d);
      const out = dd === prev ? clock(d) : `${clock(d)}\n${dd}`;
      prev = dd;
      return out;
    });
  }
  /* "1 alert", "2 alerts" (issue 34): count() is the number with its noun. */
  function plural(n, one, many = one + "s") { return Number(n) === 1 ? one : many; }
  function count(n, one, many) { return `${num(n)} ${plural(n, one, many)}`; }
  /* How long a socket that is still open has been open, from its first record to now: its
     stored duration stops at its last record and went stale (issue 34 item 6). */
  function openFor(start) {
    if (!start) return dash;
    return "open for " + duration(Math.max(0, Date.now() / 1000 - start));
  }
  /* A connection's Duration: an open live socket (LISTEN included, whose stored duration
     was "0 µs") is "open for" the time since it opened; an uploaded capture's connections
     are not live, so theirs stays the recorded span. */
  function connDuration(c) {
    const live = !String(c.host_id || "").startsWith("capture:");
    return c.closed === false && live ? openFor(c.start) : duration(c.duration);
  }
  function endpoint(ip, port) {
    if (!ip && port === null) return dash;
    const host = ip && ip.includes(":") ? `[${ip}]` : (ip || "?");
    return port === null || port === undefined ? host : `${host}:${port}`;
  }

  /* The server could not deliver some live records to this page (it fell behind, or the
     server dropped a message): say how many, for good, and offer a reload, which reads
     everything from the database again. Counts add up across gaps. */
  let missedTotal = 0;
  function missedBanner(missed) {
    if (!Number.isInteger(missed) || missed <= 0) return;
    missedTotal += missed;
    let banner = document.getElementById("live-gap");
    if (!banner) {
      banner = el("div", { id: "live-gap", class: "live-gap", role: "alert" },
        el("span", { class: "live-gap-text" }), " ",
        el("button", { type: "button", onclick: () => location.reload() }, "Reload"));
      document.body.prepend(banner);
    }
    banner.querySelector(".live-gap-text").textContent =
      `Live view incomplete: ${num(missedTotal)} record${missedTotal === 1 ? "" : "s"} missed. Reload to see everything.`;
    document.body.dataset.liveMissed = String(missedTotal);
  }

  /* The live websocket with reconnect. subs: subscriptions such as {host: "h", kind: [...]}
     or {conn: uuid} (the server wants a host, a conn or alerts in each). Calls
     onRecords(records) for each pushed batch, then acknowledges it ({"ack": id});
     add(sub) subscribes to one more target. */
  function live(subs, onRecords) {
    const status = document.getElementById("live-status");
    const current = new Map(); // JSON of a subscription -> the subscription
    for (const s of subs) current.set(JSON.stringify(s), s);
    let delay = 500;
    let socket = null;
    function setState(state, text) { status.dataset.state = state; status.textContent = "live: " + text; }
    function send(sub) {
      if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ subscribe: sub }));
    }
    function connect() {
      const scheme = location.protocol === "https:" ? "wss" : "ws";
      socket = new WebSocket(`${scheme}://${location.host}/ws/live/`);
      socket.addEventListener("open", () => {
        delay = 500;
        setState("open", "on");
        for (const s of current.values()) send(s);
      });
      socket.addEventListener("message", (ev) => {
        let msg;
        try { msg = JSON.parse(ev.data); } catch (e) { return; }
        if (msg.type === "records" && Array.isArray(msg.records)) {
          try {
            onRecords(msg.records);
          } finally {
            // Acknowledge each message once handled: the server then keeps at most a few
            // unacknowledged messages in flight and drops a page that falls too far behind
            // (webapp/traces/consumers.py) instead of queueing for it without bound.
            if (Number.isInteger(msg.id) && socket.readyState === WebSocket.OPEN) {
              socket.send(JSON.stringify({ ack: msg.id }));
            }
          }
        } else if (msg.type === "gap") missedBanner(msg.missed);
        else if (msg.type === "subscribed") document.body.dataset.liveGroups = (msg.groups || []).join(" ");
        else if (msg.type === "error") showError("live: " + msg.error);
      });
      socket.addEventListener("close", () => {
        setState("closed", "reconnecting");
        setTimeout(connect, delay);
        delay = Math.min(delay * 2, 10000);
      });
    }
    connect();
    return {
      add(sub) {
        const key = JSON.stringify(sub);
        if (current.has(key)) return;
        current.set(key, sub);
        send(sub);
      },
    };
  }

  /* uPlot stretches a time axis with a single x value to years around it (issue 34: one
     SIFTR sample drew 2027 to 2029): a lone instant gets ONE_SAMPLE_S either side, and
     each series shows its point, since one sample makes no line. */
  const ONE_SAMPLE_S = 30;
  function oneSampleAxis(opts, data) {
    const xs = (data[0] || []).filter((v) => v !== null && v !== undefined);
    if (!xs.length || Math.min(...xs) !== Math.max(...xs)) return opts;
    const scales = Object.assign({}, opts.scales);
    // uPlot widens a lone time to [t, t + 1 day] before calling range: use the sample itself
    const t = xs[0];
    scales.x = Object.assign({}, scales.x, { range: () => [t - ONE_SAMPLE_S, t + ONE_SAMPLE_S] });
    const series = opts.series.map((s, i) => (i === 0 || s.points ? s : Object.assign({}, s, { points: { show: true, size: 7 } })));
    return Object.assign({}, opts, { scales, series });
  }

  /* A uPlot chart sized to its container; returns the uPlot instance. */
  function chart(container, opts, data) {
    const width = Math.max(320, container.clientWidth || 600);
    // Time axes and the cursor's legend use the one time format (not uPlot's 12-hour default).
    const timed = !(opts.scales && opts.scales.x && opts.scales.x.time === false);
    if (timed) {
      const axes = opts.axes ? [...opts.axes] : [{}, {}];
      axes[0] = Object.assign({ values: axisTime, size: 50, space: 80 }, axes[0]); // 80 px: room for "23:59:59"
      const series = opts.series ? [...opts.series] : [{}];
      series[0] = Object.assign({ value: (u, v) => (v === null || v === undefined ? "–" : datetime(v) + "." + pad(Math.round((v % 1) * 1000) % 1000, 3)) }, series[0]);
      opts = Object.assign({}, opts, { axes, series });
    }
    if (timed) opts = oneSampleAxis(opts, data);
    const plot = new uPlot(Object.assign({ width, height: 220 }, opts), data, container);
    const observer = new ResizeObserver(() => {
      const w = Math.max(320, container.clientWidth);
      if (Math.abs(w - plot.width) > 4) plot.setSize({ width: w, height: plot.height });
    });
    observer.observe(container);
    const destroy = plot.destroy.bind(plot);
    plot.destroy = () => { observer.disconnect(); destroy(); };
    return plot;
  }

  /* A connection page's URL: a connection is its host's, so the host goes along
     (needed when two hosts report the same conn_uuid; docs/webapp.md). */
  /* An alert's row on the Alerts page: its rule and host listed, the row itself marked (#alert-ID). */
  function alertHref(a) {
    return `/alerts/?rule=${encodeURIComponent(a.rule_id)}${a.host_id ? `&host=${encodeURIComponent(a.host_id)}` : ""}#alert-${a.id}`;
  }

  function connHref(row) {
    const uuid = row.conn_uuid;
    return row.host_id ? `/connections/${uuid}/?host=${encodeURIComponent(row.host_id)}` : `/connections/${uuid}/`;
  }

  /* Makes a table row a keyboard-reachable link. */
  function linkRow(tr, href) {
    tr.tabIndex = 0;
    tr.dataset.href = href;
    tr.addEventListener("click", (ev) => { if (!ev.target.closest("a,button")) location.href = href; });
    tr.addEventListener("keydown", (ev) => { if (ev.key === "Enter") location.href = href; });
    return tr;
  }

  /* A lifecycle stage's name; an inferred one (no tracepoint: the copy or consume of a
     read buffer, stamped at its recvmsg's return, an upper bound) says so. */
  function stageName(s) { return s.inferred ? `${s.stage} (inferred)` : s.stage; }

  function sevBadge(sev) { return el("span", { class: `badge sev-${sev}`, text: sev }); }

  /* What this page's counts are short by (page_losses.py): per host, the records of the
     page's kinds and of every kind lost on the way, at the top of the page, with the way
     to every loss (Status). Gone when there is none. */
  function lossNote(losses, heading = "The counts on this page are short by records lost on the way:") {
    pageNote("page-losses", "Records lost", heading, (losses || []).map((l) => [l.host_id, `${num(l.lost)} ${l.what}`]),
      el("p", {}, "Every loss of each host: ", el("a", { href: "/status/", text: "Status" }), "."));
  }

  /* A note at the top of the page (#id): a heading, then one line per [host, text]; gone
     when there is none. */
  function pageNote(id, label, heading, lines, ...tail) {
    let note = document.getElementById(id);
    if (!lines.length) {
      if (note) note.remove();
      return;
    }
    if (!note) {
      note = el("section", { id, class: "panel page-losses", role: "note", "aria-label": label });
      const main = document.getElementById("main");
      main.insertBefore(note, main.querySelector("section") || null);
    }
    note.replaceChildren(
      el("p", { text: heading }),
      el("ul", {}, ...lines.map(([host, text]) => el("li", {}, el("strong", { text: host }), `: ${text}`))), ...tail);
  }

  return { pageData, fetchJSON, latest, el, num, bytes, duration, time, datetime, stamps, plural, count, openFor, connDuration, ONE_SAMPLE_S, axisTime, endpoint, live, chart, linkRow, connHref, alertHref, sevBadge, showError, lossNote, pageNote, stageName };
})();

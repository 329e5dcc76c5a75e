/* Connection detail page: renders /api/dash/connections/<uuid> (summary, state timeline,
   SIFTR charts with a shared cursor and zoom, the time-sequence graph, tcpdebug, skbs,
   drops, alerts) and re-renders when the websocket pushes records for this connection.
   Keep field names in sync with webapp/dashboard/detail.py. */
"use strict";

(() => {
  const { el, num, bytes, duration, time, endpoint } = NT;
  const uuid = NT.pageData.conn_uuid;
  const charts = {};
  NT.charts = charts; // uPlot instances by figure id (handy from the console and the browser tests)
  const SYNC_KEY = "siftr-" + uuid;
  const MARK_COLORS = { retransmit: "#e8590c", reset: "#c2185b" };
  let zooming = false;
  let marks = { retransmit: [], reset: [] }; // wall times, drawn aggregated across the SIFTR charts
  const MARK_BUCKET_PX = 24; // one marker per this many pixels of x axis, with its count (room for "999")
  let zoomRange = null; // the user's zoom, kept when live records redraw the charts

  function summary(c) {
    const items = [
      ["Host", c.host_id], ["Protocol", c.proto], ["Local", endpoint(c.src, c.sport) + (c.direction_guessed ? " (the opener, guessed: its opening was not seen)" : "")], ["Remote", endpoint(c.dst, c.dport)],
      ["Process", c.comm ? `${c.comm} (pid ${c.pid ?? "?"}, uid ${c.uid ?? "?"})` : "–"], ["State", c.state ? c.state + (c.state === "LISTEN" && c.listen_queue ? `, accept queue ${num(c.listen_queue.queue)} of backlog ${num(c.listen_queue.backlog)}${c.listen_queue.full ? " (full)" : ""} at ${time(c.listen_queue.at)}` : "") : (c.conn_state ? `${c.conn_state} (Zeek conn_state; history ${c.history || "–"})` : "–")],
      ["Opened", NT.datetime(c.start)], ["Duration", NT.connDuration(c)], ["Bytes out", bytes(c.bytes_out) + (c.retrans_bytes_out ? ` (incl. ${bytes(c.retrans_bytes_out)} retransmitted)` : "")],
      ["Bytes in", bytes(c.bytes_in)], ["Packets out", num(c.packets_out)], ["Packets in", num(c.packets_in)], ["Retransmitted", c.retrans_segs ? `${num(c.retrans_segs)} segments, ${bytes(c.retrans_bytes_out)}` : NT.count(c.retrans ?? 0, "retransmission")], ["Handshake RTT", c.handshake_rtt_us ? duration(c.handshake_rtt_us / 1e6) : "–"],
    ];
    document.getElementById("summary").replaceChildren(...items.map(([k, v]) => el("div", {}, el("dt", { text: k }), el("dd", { text: v ?? "–" }))));
  }

  function timeline(items, current) {
    const ol = document.getElementById("timeline");
    const when = NT.stamps(items.map((it) => it.ts));
    ol.replaceChildren(...items.map((it, i) => {
      if (it.type === "state") {
        return el("li", { class: "state", dataset: { state: it.state } },
          el("span", { text: when[i] }),
          el("strong", { class: `state-${it.state}`, text: it.state }),
          el("span", { class: "num", title: "time in this state", text: it.duration === null ? "until now" : duration(it.duration) }),
          el("span", { text: `${it.prev_state} → ${it.state}, caused by ${it.who}${it.inferred ? " (inferred)" : ""}` }));
      }
      if (it.type === "retransmits") { // one row per run of retransmissions (detail.py, retrans_runs.py)
        const span = it.count > 1 ? `${time(it.ts)} – ${time(it.last)}` : "";
        return el("li", { class: "mark mark-retransmit", dataset: { mark: "retransmits", count: it.count } },
          el("span", { text: when[i] }), el("span", { text: `↻ ${num(it.count)} retransmit${it.count === 1 ? "" : "s"}` }),
          el("span", { class: "num", title: "length of the run", text: it.count > 1 ? duration(it.last - it.ts) : "" }),
          el("span", { text: it.text + (span ? `; ${span}` : "") }));
      }
      return el("li", { class: `mark mark-${it.type}`, dataset: { mark: it.type } },
        el("span", { text: when[i] }), el("span", { text: "⚠ RST" }),
        el("span", {}), el("span", { text: it.text }));
    }));
    if (!items.length) {
      // A capture's connection has no kernel state changes: its summary's Zeek states say what happened.
      const zeek = current && current.conn_state ? ` The capture's summary: conn_state ${current.conn_state}, history ${current.history || "–"}.` : "";
      ol.append(el("li", { class: "muted", text: "No state changes recorded." + zeek }));
    }
  }
  function syncZoom(source) {
    if (zooming) return;
    zooming = true;
    const { min, max } = source.scales.x;
    for (const c of Object.values(charts)) if (c !== source && c.data[0].length) c.setScale("x", { min, max });
    zooming = false;
  }

  /* Retransmissions (orange) and resets (magenta) aggregated per MARK_BUCKET_PX of x axis:
     one triangle on the plot's top edge per bucket, with its count when above one, and a
     faint line down the plot; a lossy transfer no longer paints a barcode. */
  function drawMarks(u) {
    const { ctx, bbox } = u;
    const pxr = devicePixelRatio || 1;
    const step = MARK_BUCKET_PX * pxr;
    ctx.save();
    ctx.font = `${10 * pxr}px system-ui, sans-serif`;
    ctx.textAlign = "center";
    for (const [type, times] of Object.entries(marks)) {
      const buckets = new Map();
      for (const t of times) {
        const x = u.valToPos(t, "x", true);
        if (x < bbox.left || x > bbox.left + bbox.width) continue;
        const b = Math.floor((x - bbox.left) / step);
        buckets.set(b, (buckets.get(b) || 0) + 1);
      }
      ctx.strokeStyle = ctx.fillStyle = MARK_COLORS[type];
      for (const [b, n] of buckets) {
        const x = Math.round(bbox.left + (b + 0.5) * step);
        ctx.globalAlpha = 0.25;
        ctx.beginPath(); ctx.moveTo(x, bbox.top); ctx.lineTo(x, bbox.top + bbox.height); ctx.stroke();
        ctx.globalAlpha = 1;
        ctx.beginPath(); ctx.moveTo(x - 4 * pxr, bbox.top); ctx.lineTo(x + 4 * pxr, bbox.top); ctx.lineTo(x, bbox.top + 6 * pxr); ctx.fill();
        if (n > 1) ctx.fillText(String(n), x, bbox.top + 16 * pxr);
      }
    }
    ctx.restore();
  }
  NT.markBuckets = (id) => { // per chart: how many markers it draws (the browser tests count them)
    const u = charts[id];
    const step = MARK_BUCKET_PX * (devicePixelRatio || 1);
    const out = new Set();
    for (const t of marks.retransmit) {
      const x = u.valToPos(t, "x", true);
      if (x >= u.bbox.left && x <= u.bbox.left + u.bbox.width) out.add(Math.floor((x - u.bbox.left) / step));
    }
    return out.size;
  };

  function siftrChart(id, title, series, columns, fmt, data) {
    const container = document.getElementById(id);
    if (charts[id]) charts[id].destroy();
    container.replaceChildren();
    const opts = {
      title,
      scales: { x: { time: true } },
      cursor: { sync: { key: SYNC_KEY, setSeries: true }, drag: { x: true, y: false } },
      series: [{}, ...series.map((s) => ({ label: s.label, stroke: s.color, width: 1.5, value: (u, v, si, idx) => (v !== null ? fmt(v) : idx === null || idx === undefined ? "–" : s.none || "–") }))],
      axes: [{}, { size: 70, values: (u, vals) => vals.map(fmt) }],
      hooks: {
        setScale: [(u, key) => { if (key === "x") syncZoom(u); }],
        setSelect: [(u) => { if (u.select.width > 0) zoomRange = { min: u.posToVal(u.select.left, "x"), max: u.posToVal(u.select.left + u.select.width, "x") }; }],
        draw: [drawMarks],
      },
    };
    charts[id] = NT.chart(container, opts, [data.t, ...columns.map((c) => data[c])]);
    if (zoomRange) charts[id].setScale("x", zoomRange);
  }

  /* H2: how sampled the SIFTR samples are, from the kernel's exact per-flow counters;
     the cwnd and srtt charts carry the ratio in their titles. */
  let sampledSuffix = "";
  function sampling(d) {
    const note = document.getElementById("siftr-sampling");
    sampledSuffix = "";
    if (!d || d.ratio === null) { note.hidden = true; return; }
    const last = d.windows.length ? d.windows[d.windows.length - 1] : null;
    const sampled = d.ratio > 1.0001;
    note.dataset.ratio = String(d.ratio);
    note.dataset.polled = String(Boolean(d.polled));
    note.textContent = d.polled
      ? `Polled (siftr-poll): the socket's control block read every poll interval (0.1 s by default) when it moved; ${NT.count(d.samples, "sample")} for ${NT.count(d.packets, "packet")} (counted exactly in the kernel). ` +
        "cwnd, srtt and the windows are seen at the polls only: what happened between two polls can be missing."
      : sampled
      ? `Sampled: one SIFTR sample per ${num(d.ratio, 2)} packets (${NT.count(d.packets, "packet")}, ${NT.count(d.samples, "sample")}, counted exactly in the kernel)` +
        (last && last.ratio !== null ? `; latest window ${num(last.ratio, 2)} (${NT.count(last.packets, "packet")} at ${time(last.t)}).` : ".") +
        " cwnd and srtt are seen between samples only: shorter dips and spikes can be missing."
      : `Every packet sampled (${NT.count(d.packets, "packet")}, ${NT.count(d.samples, "sample")}).`;
    note.hidden = false;
    if (d.polled) sampledSuffix = " (polled)";
    else if (sampled) sampledSuffix = ` (sampled 1 in ${num(d.ratio, 1)})`;
  }

  function siftr(data) {
    const empty = !data.t.length;
    document.getElementById("siftr-empty").hidden = !empty;
    document.querySelector(".chart-grid").hidden = empty;
    if (empty) return;
    const us = (v) => duration(v / 1e6);
    // Linux counts cwnd and ssthresh in segments; SIFTR reports bytes: the chart says how they were made
    siftrChart("chart-cwnd", "cwnd and ssthresh, segments × MSS" + sampledSuffix, [{ label: "cwnd", color: "#0b5cad" }, { label: "ssthresh", color: "#b3261e", none: "infinite (not set yet)" }], ["cwnd", "ssthresh"], bytes, data);
    siftrChart("chart-rtt", "srtt and rttvar" + sampledSuffix, [{ label: "srtt", color: "#1f7a3a" }, { label: "rttvar", color: "#a15c00" }], ["srtt", "rttvar"], us, data);
    siftrChart("chart-wnd", "snd_wnd and rcv_wnd", [{ label: "snd_wnd", color: "#5a3fa0" }, { label: "rcv_wnd", color: "#0a7d8c" }], ["snd_wnd", "rcv_wnd"], bytes, data);
    siftrChart("chart-inflight", "bytes in flight", [{ label: "in flight", color: "#10243b" }], ["inflight"], bytes, data);
  }

  const TSEQ_SOURCES = {
    tcp_segment: "From the packets (tcp_segment records).",
    siftr_sample: "From the kernel's SIFTR samples (no packets recorded; with siftr-poll, one per poll interval, so steps between polls are joined): snd_nxt, the ACK line snd_una, the window line snd_una + snd_wnd, retransmissions at the tcp_retransmit records' sequence; SACKs estimated as snd_una + sacked_out × mss.",
    tcpdebug_snapshot: "From the kernel's tcpdebug snapshots (no packets or SIFTR samples recorded): snd_nxt, the ACK line snd_una, the window line snd_una + snd_wnd, retransmissions at the tcp_retransmit records' sequence.",
  };
  function tseq(data) {
    const empty = !data.t.length;
    document.getElementById("tseq-empty").hidden = !empty;
    document.getElementById("tseq-source").textContent = TSEQ_SOURCES[data.source] || "";
    const container = document.getElementById("chart-tseq");
    if (charts["chart-tseq"]) charts["chart-tseq"].destroy();
    container.replaceChildren();
    container.hidden = empty;
    if (empty) return;
    const dots = (color, size) => ({ stroke: color, fill: color, width: 0, paths: () => null, points: { show: true, size, fill: color } });
    const opts = {
      title: "sequence vs time",
      height: 300,
      scales: { x: { time: true } },
      cursor: { drag: { x: true, y: true, uni: 20 } },
      series: [{},
        Object.assign({ label: "data" }, dots("#0b5cad", 4)),
        Object.assign({ label: "retransmission" }, dots("#b3261e", 7)),
        Object.assign({ label: "SACK" }, dots("#1f7a3a", 5)),
        { label: "ACK", stroke: "#555", width: 1.5, spanGaps: true, paths: uPlot.paths.stepped({ align: 1 }) },
        { label: "receive window", stroke: "#c9a227", width: 1, spanGaps: true, paths: uPlot.paths.stepped({ align: 1 }) }],
      axes: [{}, { size: 80 }],
    };
    // Without packets the points are the kernel's: the data "points" are snd_nxt (drawn as a line).
    if (data.source !== "tcp_segment") {
      opts.series[1] = { label: "snd_nxt (sent)", stroke: "#0b5cad", width: 1.5, spanGaps: true, paths: uPlot.paths.stepped({ align: 1 }) };
      opts.series[3].label = "SACK (estimated)"; // the kernel counts SACKed segments, not their ranges
    }
    charts["chart-tseq"] = NT.chart(container, opts, [data.t, data.data, data.retrans, data.sack, data.ack, data.win]);
  }

  function alerts(rows) {
    document.querySelector("#alerts tbody").replaceChildren(...rows.map((a) => el("tr", {},
      el("td", { text: time(a.start) }), el("td", {}, NT.sevBadge(a.severity)),
      el("td", {}, el("a", { href: NT.alertHref(a), text: a.rule_id })),
      el("td", { class: "num", text: num(a.count) }), el("td", { class: "msg" }, el("span", { class: "clamp", title: a.message, text: a.message }),
        // a grouped finding this socket is a member of (issue 34): the finding, with its other members
        a.members ? el("span", { class: "muted" }, " · ", el("a", { class: "finding", href: NT.alertHref(a), text: `one of ${NT.count(a.members, "socket")} in this finding` })) : null))));
    if (!rows.length) document.querySelector("#alerts tbody").append(el("tr", {}, el("td", { colspan: 5, class: "muted", text: "No alert fired for this connection." })));
  }

  /* Where a drop happened: its socket's (this connection's), or a packet of its 4-tuple
     dropped where no socket held it (forwarded through this host), on that interface. */
  function dropWhere(d, c) {
    if (d.matched === "socket") return "this socket";
    const dir = d.src === c.src && d.sport === c.sport ? "outgoing" : "incoming";
    return `${dir} packet, no socket${d.if_name ? ` (at ${d.if_name})` : ""}`;
  }
  function drops(rows, c) {
    document.querySelector("#drops tbody").replaceChildren(...rows.map((d) => el("tr", {},
      el("td", { text: time(d.ts_wall) }), el("td", { text: d.drop_reason_str }), el("td", { text: dropWhere(d, c) }),
      el("td", { text: d.drop_location || "–" }), el("td", { class: "num", text: num(d.len) }),
      el("td", {}, d.skb_uid !== null ? el("a", { href: `/buffers/?skb=${d.skb_uid}`, text: `skb ${d.skb_uid}` }) : "–"))));
  }

  const STAGE_COLORS = ["#0b5cad", "#1f7a3a", "#a15c00", "#5a3fa0", "#0a7d8c", "#b3261e", "#6b7280", "#10243b"];
  function stageBar(stages) {
    const total = stages.reduce((s, x) => s + (x.since_prev_ns || 0), 0) || 1;
    return el("div", { class: "bar", role: "img", "aria-label": stages.map((s) => `${NT.stageName(s)} ${duration((s.since_prev_ns || 0) / 1e9)}`).join(", ") },
      ...stages.map((s, i) => el("span", { title: `${NT.stageName(s)}: ${duration((s.since_prev_ns || 0) / 1e9)}`, style: { width: `${Math.max(2, 100 * (s.since_prev_ns || 0) / total)}%`, background: STAGE_COLORS[i % STAGE_COLORS.length] } })));
  }
  function skbs(rows) {
    document.querySelector("#skbs tbody").replaceChildren(...rows.map((b) => el("tr", {},
      el("td", {}, el("a", { href: `/buffers/?skb=${b.skb_uid}`, text: String(b.skb_uid) })),
      el("td", { text: time(b.first) }),
      el("td", {}, stageBar(b.stages), el("span", { class: "muted", text: b.stages.map((s) => `${NT.stageName(s)} +${duration((s.since_prev_ns || 0) / 1e9)}`).join(" → ") })),
      el("td", { class: "num", text: duration(b.total_ns / 1e9) }), el("td", { text: b.end || "–" }))));
  }

  // How many of this host's buffers the kernel follows (--skb-sample), beside the lifecycles.
  function skbSampling(list) {
    const p = document.getElementById("skbs-sampling");
    const s = (list || [])[0];
    p.dataset.skbSample = s ? String(s.skb_sample) : "";
    p.dataset.skbStages = s ? s.skb_stages : "";
    p.dataset.skbWindow = s && s.skb_window ? s.skb_window : "";
    const stages = (s && s.window_note ? ` ${s.window_note}` : "") + (s && s.stages_note ? ` ${s.stages_note}` : "");
    p.textContent = !s ? "This host's collector does not run skb-lifecycle, so no buffer lifecycles (nettrail up: NETTRAIL_SKB_SAMPLE=N adds them)."
      : (s.skb_sample > 1 ? `Sampled: the kernel follows 1 buffer in ${num(s.skb_sample)} from its first sighting to its end; the others are counted, not shown.`
        : "Every buffer is followed (--skb-sample 1).") + stages;
  }

  function tcpdebug(rows) {
    document.querySelector("#tcpdebug tbody").replaceChildren(...rows.map((d) => el("tr", {},
      el("td", { text: time(d.ts_wall) }), el("td", { text: d.direction }), el("td", { text: d.prureq_str || "–" }),
      el("td", { text: d.state || "–" }), el("td", { class: "num", text: d.snd_una ?? "–" }), el("td", { class: "num", text: d.snd_nxt ?? "–" }),
      el("td", { class: "num", text: d.rcv_nxt ?? "–" }), el("td", { class: "num", text: num(d.snd_cwnd) }),
      el("td", { class: "num", text: num(d.snd_ssthresh) }), el("td", { class: "num", text: num(d.srtt_us) }),
      el("td", { class: "num", text: num(d.rto_ms) }), el("td", { text: d.ca_state || "–" }), el("td", { text: d.flags || "–" }))));
  }

  /* An empty panel says why (webapp/dashboard/empty_panels.py): its provider is not
     running (and how to enable it), the host is a capture, or nothing was recorded. */
  function emptyWhy(d) {
    const rows = { siftr: d.siftr.t.length, drops: d.drops.length, skbs: d.skbs.length, tcpdebug: d.tcpdebug.length };
    for (const [panel, n] of Object.entries(rows)) {
      const p = document.getElementById(`${panel}-empty`);
      p.hidden = n > 0;
      if (!n && d.empty_why[panel]) p.textContent = d.empty_why[panel];
    }
  }

  let loading = false;
  let again = false;
  async function load() {
    if (loading) { again = true; return; }
    loading = true;
    try {
      const d = await NT.fetchJSON(`/api/dash/connections/${uuid}?host=${encodeURIComponent(NT.pageData.host || "")}`);
      summary(d.conn);
      NT.lossNote(d.losses, "While this connection was open, its host lost records on the way (some may be this connection's):");
      marks = d.marks;
      timeline(d.timeline, d.conn);
      sampling(d.sampling);
      siftr(d.siftr);
      tseq(d.tseq);
      alerts(d.alerts);
      drops(d.drops, d.conn);
      skbs(d.skbs);
      skbSampling(d.skb_sampling);
      tcpdebug(d.tcpdebug);
      emptyWhy(d);
      document.body.dataset.loaded = "1";
    } catch (e) {
      NT.showError(e.message);
    } finally {
      loading = false;
      if (again) { again = false; setTimeout(load, 1000); }
    }
  }

  document.querySelector(".chart-grid").addEventListener("dblclick", () => { zoomRange = null; });
  load();
  NT.live([{ conn: uuid }], () => load());
})();

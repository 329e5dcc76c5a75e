/* Tracing page (webapp/dashboard/tracing.py): "Running" is the host's newest
   collector_status (page data), then follows it live, so a swap the form asked for
   shows when the collector makes it. */
"use strict";

(() => {
  const host = NT.pageData.host;
  const running = document.getElementById("tracing-running");

  function describe(s) {
    const windows = s.skb_window ? `, in windows of ${s.skb_window.replace("/", " s every ")} s` : "";
    const sample = s.skb_sample ? ` (skb-lifecycle: one buffer in ${s.skb_sample}${windows})` : "";
    const who = s.providers_from === "dashboard" ? "as the dashboard asked" : "its own choice";
    const gap = s.untraced_ns === null || s.untraced_ns === undefined ? ""
      : `; nothing was traced for ${s.untraced_ns} ns while its programs were swapped`;
    return `${(s.providers || []).join(", ")}${sample}, ${who}${gap}`;
  }

  running.textContent = NT.pageData.running ? describe(NT.pageData.running) : "no collector status from this host yet";
  document.body.dataset.loaded = "1";
  NT.live([{ host, kind: ["collector_status"] }], (records) => {
    const statuses = records.filter((r) => r.kind === "collector_status" && r.host_id === host);
    if (statuses.length) running.textContent = describe(statuses[statuses.length - 1]);
  });
})();

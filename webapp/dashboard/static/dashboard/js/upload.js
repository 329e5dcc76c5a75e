/* Captures page: uploads the chosen file with XMLHttpRequest so the page can show the
   upload's progress (fetch() has no upload progress). The server answers a stored capture
   with a redirect to its result page (followed by the request: responseURL) and a refusal
   with this page and the reason in #upload-error, which is copied here. Without script
   the form posts as usual. Keep in sync with: webapp/api/upload.py, captures.html. */
"use strict";

(() => {
  const form = document.getElementById("upload-form");
  const status = document.getElementById("upload-status");
  const bar = document.getElementById("upload-progress");
  const text = document.getElementById("upload-text");
  const error = document.getElementById("upload-error");
  const button = form.querySelector("button[type=submit]");

  function fail(message) {
    error.textContent = message;
    error.hidden = false;
    button.disabled = false;
    status.hidden = true;
  }

  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const file = form.elements.capture.files[0];
    if (!file) { fail("choose a capture file"); return; }
    const xhr = new XMLHttpRequest();
    xhr.open("POST", form.action);
    xhr.responseType = "document";
    xhr.upload.addEventListener("progress", (e) => {
      if (!e.lengthComputable) return;
      const pct = Math.floor((100 * e.loaded) / e.total);
      // The request is the file and its form's few hundred bytes: say it in the file's
      // size, the one figure the page shows before and after.
      const sent = Math.min(file.size, Math.round((file.size * e.loaded) / e.total));
      bar.value = pct;
      text.textContent = `${NT.bytes(sent)} of ${NT.bytes(file.size)} sent (${pct}%)`;
    });
    xhr.upload.addEventListener("load", () => { bar.value = 100; text.textContent = `${NT.bytes(file.size)} sent; analysing…`; });
    xhr.addEventListener("load", () => {
      if (xhr.status === 200 && xhr.responseURL && !xhr.responseURL.includes("/captures/upload/")) {
        location.assign(xhr.responseURL);
        return;
      }
      const said = xhr.response && xhr.response.getElementById("upload-error");
      fail((said && said.textContent.trim()) || `the upload failed (HTTP ${xhr.status})`);
    });
    xhr.addEventListener("error", () => fail("the upload did not reach the server"));
    error.hidden = true;
    button.disabled = true;
    status.hidden = false;
    bar.value = 0;
    text.textContent = `0 of ${NT.bytes(file.size)} sent`;
    xhr.send(new FormData(form));
  });
})();

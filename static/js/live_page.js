/* Starts the live charts of a pipeline or node page: which one is in #live-page's data
   attributes (no inline script: Content-Security-Policy). */
document.addEventListener("DOMContentLoaded", function () {
  "use strict";
  var page = document.getElementById("live-page");
  if (!page) return;
  var kind = page.dataset.kind;
  if (kind === "node") {
    window.TandemNode = function (row) {
      var st = document.getElementById("node-state");
      st.className = "badge state-" + row.state; st.textContent = row.state;
      document.getElementById("node-seen").textContent = row.seen_s == null ? "never" : Math.round(row.seen_s) + " s ago";
      var src = document.getElementById("node-src"); var html = window.Tandem.sourcePill(row.src);
      if (src.innerHTML !== html) src.innerHTML = html;
    };
  }
  window.TandemCharts.page({ socketPath: "/ws/live/", subscribe: [{ topic: kind, id: Number(page.dataset.id) }], kind: kind, id: Number(page.dataset.id) });
});

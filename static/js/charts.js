/* Pipeline and node pages: KPI cards, time-series charts (rollups on load + live points),
   per-position and batch histograms, node rows. */
(function () {
  "use strict";
  var T = window.Tandem;
  var C = T.COLORS;

  var FORMAT = {
    acceptance_rate: function (v) { return T.pct(v); },
    mean_acceptance_length: function (v) { return T.fmt(v, 2); },
    alpha: function (v) { return T.fmt(v, 3); },
    tokens_per_s: function (v) { return T.fmt(v, 1); },
    batch_mean: function (v) { return T.fmt(v, 1); },
    verify_step_ms: function (v) { return T.fmt(v, 1); },
    draft_step_ms: function (v) { return T.fmt(v, 2); },
    itl_p50_ms: function (v) { return T.fmt(v, 0); },
    itl_p99_ms: function (v) { return T.fmt(v, 0); },
    ttft_p50_ms: function (v) { return T.fmt(v, 0); },
    power_w: T.watts,
    power_draft_w: T.watts,
    power_verify_w: T.watts,
    tokens_per_j: function (v) { return T.fmt(v, 3); },
    tokens_per_j_draft: function (v) { return T.fmt(v, 2); },
    tokens_per_j_verify: function (v) { return T.fmt(v, 2); },
    utilization: function (v) { return T.pct(v, 0); },
    queue_depth: function (v) { return T.fmt(v, 0); },
    running: function (v) { return T.fmt(v, 0); },
  };

  var CHARTS = [
    ["ch-accept", [
      { key: "acceptance_rate", name: "acceptance rate", color: C.accept, scale: 100, unit: "%" },
      { key: "alpha", name: "α (est.)", color: C.alpha, scale: 100, unit: "%" },
    ], { yaxis: { ticksuffix: "%", range: [0, 100], gridcolor: C.grid } }],
    ["ch-length", [{ key: "mean_acceptance_length", name: "mean acceptance length", color: C.length }]],
    ["ch-tokens", [{ key: "tokens_per_s", name: "tokens/s", color: C.tokens, fill: "tozeroy", fillcolor: "rgba(122,162,255,0.12)" }]],
    ["ch-batch", [{ key: "batch_mean", name: "mean batch", color: C.batch }]],
    ["ch-itl", [
      { key: "itl_p50_ms", name: "p50", color: C.p50, unit: "ms" },
      { key: "itl_p99_ms", name: "p99", color: C.p99, unit: "ms" },
    ]],
    ["ch-power", [
      { key: "power_draft_w", name: "drafting", color: C.draft, stack: "p", unit: "W" },
      { key: "power_verify_w", name: "verification", color: C.verify, stack: "p", unit: "W" },
    ]],
    ["ch-tpj", [
      { key: "tokens_per_j", name: "all", color: C.tpj },
      { key: "tokens_per_j_draft", name: "per drafting J", color: C.draft },
      { key: "tokens_per_j_verify", name: "per verification J", color: C.verify },
    ]],
    ["ch-util", [{ key: "utilization", name: "utilization", color: C.util, scale: 100, unit: "%" }], { yaxis: { ticksuffix: "%", range: [0, 100], gridcolor: C.grid } }],
  ];

  function updateKpis(stats) {
    Object.keys(FORMAT).forEach(function (key) {
      var els = document.querySelectorAll('[data-k="' + key + '"]');
      for (var i = 0; i < els.length; i++) {
        var text = FORMAT[key](stats[key]);
        if (els[i].textContent !== text) els[i].textContent = text;
      }
    });
    T.setHTML(document, '[data-k="power_source"]', T.sourcePill(stats.power_source));
  }

  function bars(stats) {
    var pos = stats.per_position_acceptance || [];
    T.barChart(document.getElementById("ch-pos"), pos.map(function (_, i) { return "pos " + i; }),
      pos.map(function (v) { return v * 100; }), C.accept, { yaxis: { ticksuffix: "%", range: [0, 100], gridcolor: C.grid } });
    var hist = stats.batch_hist || {};
    var sizes = Object.keys(hist).sort(function (a, b) { return a - b; });
    T.barChart(document.getElementById("ch-batch-hist"), sizes, sizes.map(function (k) { return hist[k]; }), C.batch);
  }

  function updateRows(nodes) {
    var counts = { draft: 0, verify: 0 };
    (nodes || []).forEach(function (r) {
      if (r.role) counts[r.role] = (counts[r.role] || 0) + 1;
      var tr = document.querySelector('tr[data-id="' + r.id + '"]');
      if (!tr) return;
      var put = function (cls, html) {
        var el = tr.querySelector("." + cls);
        if (el && el.innerHTML !== html) el.innerHTML = html;
      };
      put("c-state", '<span class="badge state-' + T.esc(r.state) + '">' + T.esc(r.state) + "</span>");
      put("c-power", T.watts(r.power_w) + " " + T.sourcePill(r.src));
      put("c-util", T.pct(r.util, 0));
      put("c-batch", T.fmt(r.batch, 1));
      put("c-tps", r.role === "draft" && !r.tps ? '<span class="dim" title="Drafters deliver no tokens themselves: their verifiers do">—</span>' : T.fmt(r.tps, 1));
      put("c-acc", T.pct(r.acc));
    });
    T.setText(document, "#n-draft", counts.draft + " live");
    T.setText(document, "#n-verify", counts.verify + " live");
  }

  function page(opts) {
    var series = T.jsonScript("series-data") || { t: [] };
    var live = T.jsonScript("live-data");
    var charts = [];
    CHARTS.forEach(function (spec) {
      var el = document.getElementById(spec[0]);
      if (el && T.lineChart(el, series, spec[1], spec[2])) charts.push(el);
    });
    var pointDue = T.every(2000);
    var barsDue = T.every(1000);
    function onStats(ts, stats, nodes) {
      updateKpis(stats || {});
      if (barsDue()) bars(stats || {});
      if (pointDue()) charts.forEach(function (el) { T.appendPoint(el, ts, stats || {}); });
      if (nodes) updateRows(nodes);
    }
    if (live) {
      if (live.type === "pipeline.update") { bars(live.pipeline.stats || {}); updateRows(live.nodes); }
      if (live.type === "node.update") bars(live.stats || {});
    }
    new T.LiveSocket(opts.socketPath, {
      subscribe: opts.subscribe,
      onMessage: function (m) {
        if (m.type === "pipeline.update") {
          onStats(m.ts, m.pipeline.stats, m.nodes);
          if (m.config) {
            var k = m.config.k_policy || {};
            T.setText(document, '[data-c="k"]', k.mode === "fixed" ? String(k.k) : String(k.mode || "—"));
            T.setText(document, '[data-c="max_verify_batch"]', String(m.config.max_verify_batch));
            T.setText(document, '[data-c="max_batch_wait_ms"]', String(m.config.max_batch_wait_ms));
            T.setText(document, '[data-c="version"]', String(m.config.version));
          }
        } else if (m.type === "node.update") {
          onStats(m.ts, m.stats, null);
          if (window.TandemNode) window.TandemNode(m.node);
        }
      },
    });
  }

  window.TandemCharts = { page: page };
})();

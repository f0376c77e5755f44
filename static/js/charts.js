/* Pipeline and node pages: KPI cards, time-series charts (rollups on load + live points),
   per-position and batch histograms, node rows. */
(function () {
  "use strict";
  var T = window.Tandem;
  var C = T.COLORS;

  var FORMAT = {
    acceptance_rate: function (v) { return T.pct(v); },
    mean_acceptance_length: function (v) { return T.fmt(v, 2); },
    k_mean: function (v) { return T.fmt(v, 1); },
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
    waiting: function (v) { return T.fmt(v, 0); },
    kv_usage: function (v) { return T.pct(v, 0); },
    ttft_p99_ms: function (v) { return T.fmt(v, 0); },
  };

  /* Request and error rates come from the generation records (the history API), not from the
     live stream: they are refreshed every RATES_MS. */
  var RATES = ["ch-rates", [
    { key: "requests_per_s", name: "requests/s", color: C.tokens, unit: "/s" },
    { key: "error_rate", name: "errors", color: C.p99, scale: 100, unit: "%", axis: "y2" },
  ], { yaxis2: { overlaying: "y", side: "right", rangemode: "tozero", ticksuffix: "%", gridcolor: "rgba(0,0,0,0)", color: C.p99 } }];
  var RATES_MS = 15000;
  var RANGE_MS = { "5m": 5 * 60000, "1h": 3600000, "6h": 6 * 3600000, "24h": 24 * 3600000 };

  var CHARTS = [
    ["ch-accept", [
      { key: "acceptance_rate", name: "acceptance rate", color: C.accept, scale: 100, unit: "%" },
      { key: "alpha", name: "α (est.)", color: C.alpha, scale: 100, unit: "%", dash: "dash" },
    ], { yaxis: { ticksuffix: "%", range: [0, 100], gridcolor: C.grid } }],
    ["ch-length", [{ key: "mean_acceptance_length", name: "mean acceptance length", color: C.length }]],
    ["ch-k", [
      { key: "k_mean", name: "all rounds", color: C.draft },
      { key: "k_batch_1", name: "batch 1", color: "#f5a524", dash: "dot" },
      { key: "k_batch_4", name: "batch 2–4", color: "#4cc9f0", dash: "dot" },
      { key: "k_batch_16", name: "batch 5–16", color: "#3ecf8e", dash: "dot" },
      { key: "k_batch_64", name: "batch 17–64", color: "#f25f5c", dash: "dot" },
      { key: "k_batch_4096", name: "batch 65+", color: "#e3e7ef", dash: "dot" },
    ], { yaxis: { rangemode: "tozero", gridcolor: C.grid } }],
    ["ch-tokens", [{ key: "tokens_per_s", name: "tokens/s", color: C.tokens, fill: "tozeroy", fillcolor: "rgba(122,162,255,0.12)" }]],
    ["ch-batch", [{ key: "batch_mean", name: "mean batch", color: C.batch }]],
    ["ch-itl", [
      { key: "itl_p50_ms", name: "p50", color: C.p50, unit: "ms" },
      { key: "itl_p99_ms", name: "p99", color: C.p99, unit: "ms" },
    ], null, [{ key: "itl_p99_ms", label: "SLO ITL p99" }]],
    ["ch-ttft", [
      { key: "ttft_p50_ms", name: "p50", color: C.p50, unit: "ms" },
      { key: "ttft_p99_ms", name: "p99", color: C.p99, unit: "ms" },
    ], null, [{ key: "ttft_p99_ms", label: "SLO TTFT p99" }]],
    ["ch-queue", [
      { key: "running", name: "running", color: C.tokens },
      { key: "waiting", name: "waiting (queue)", color: C.p50 },
    ]],
    ["ch-kv", [{ key: "kv_usage", name: "KV slots in use", color: C.verify, scale: 100, unit: "%" }], { yaxis: { ticksuffix: "%", range: [0, 100], gridcolor: C.grid } }],
    ["ch-power", [
      { key: "power_draft_w", name: "drafting", color: C.draft, unit: "W" },
      { key: "power_verify_w", name: "verification", color: C.verify, unit: "W" },
    ]],
    ["ch-tpj", [
      { key: "tokens_per_j", name: "all", color: C.tpj },
      { key: "tokens_per_j_draft", name: "per drafting J", color: C.draft },
      { key: "tokens_per_j_verify", name: "per verification J", color: C.verify },
    ]],
    ["ch-util", [{ key: "utilization", name: "utilization", color: C.util, scale: 100, unit: "%" }], { yaxis: { ticksuffix: "%", range: [0, 100], gridcolor: C.grid } }],
  ];

  /* The acceptance figures a page keeps when traffic stops: the last measured ones, with a
     label saying so and how old they are (the live window then has none). */
  var LAST_FIELDS = ["acceptance_rate", "mean_acceptance_length", "alpha"];
  function withLast(stats, last) {
    if (stats.acceptance_rate != null || !last || last.acceptance_rate == null) return { stats: stats, last: null };
    var shown = Object.assign({}, stats);
    LAST_FIELDS.forEach(function (key) { shown[key] = last[key]; });
    return { stats: shown, last: last };
  }
  function updateKpis(live, lastMeasured, slo) {
    var picked = withLast(live, lastMeasured);
    var stats = picked.stats;
    T.windowLabel(document.getElementById("kpis"), picked.last);
    T.sloBreach(document, stats, slo);
    var note = picked.last ? '<span class="last-measured">last measured ' + T.ago(picked.last.age_s) + "</span>" : "";
    T.setHTML(document, '[data-k="acc_last"]', note);
    T.setHTML(document, '[data-k="mal_last"]', note);
    document.querySelectorAll("#kpis .kpi").forEach(function (el) {
      if (el.querySelector('[data-k="acc_last"], [data-k="mal_last"]')) {
        if (picked.last) el.dataset.last = "1";
        else delete el.dataset.last;
      }
    });
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

  /* `nodes`: the rows the page lists (the server sends at most its first rows per role);
     the counts come from the pipeline's summary (every placed node). */
  function updateRows(nodes, summary) {
    var counts = { draft: 0, verify: 0 };
    if (summary && summary.drafters != null) counts = { draft: summary.drafters, verify: summary.verifiers };
    else (nodes || []).forEach(function (r) { if (r.role) counts[r.role] = (counts[r.role] || 0) + 1; });
    (nodes || []).forEach(function (r) {
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

  function refs(spec, slo) {
    return (spec[3] || []).map(function (r) {
      var y = (slo || {})[r.key];
      return { key: r.key, y: y, label: r.label + " " + T.fmt(y, 0) + " ms" };
    });
  }

  function page(opts) {
    var hist = T.jsonScript("history-data") || {};
    var live = T.jsonScript("live-data");
    var api = "/api/v1/series/" + opts.kind + "/" + opts.id;
    /* The configuration version the page was rendered with: live updates older than it (the
       aggregator's registry lags a change by a few seconds) never roll the header back. */
    var shown = document.getElementById("config");
    var version = shown && shown.dataset.version ? Number(shown.dataset.version) : null;
    var state = { range: hist.range || "1h", markers: hist.markers || [], slo: hist.slo || {}, version: version };
    var charts = [];
    // a range the page was opened with (?range=, a shared view) is shown whole at once
    var linked = new URLSearchParams(location.search).get("range") === state.range;
    CHARTS.forEach(function (spec) {
      var el = document.getElementById(spec[0]);
      if (el) {
        el._windowMs = RANGE_MS[state.range];
        el._explicit = linked;
      }
      if (el && T.lineChart(el, hist.series || { t: [] }, spec[1], spec[2])) {
        el._spec = spec;
        charts.push(el);
      }
    });
    var ratesEl = document.getElementById(RATES[0]);
    if (ratesEl && T.lineChart(ratesEl, hist.rates || { t: [] }, RATES[1], RATES[2])) ratesEl._spec = RATES;
    function all() { return ratesEl && ratesEl.data ? charts.concat([ratesEl]) : charts; }
    function decorateAll() {
      all().forEach(function (el) { T.decorate(el, state.markers, refs(el._spec, state.slo)); });
    }
    decorateAll();

    function load(parts) {
      var url = api + "?range=" + encodeURIComponent(state.range) + (parts ? "&parts=" + parts : "");
      return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { if (!r.ok) throw new Error("history: " + r.status); return r.json(); });
    }
    function setRange(range) {
      state.range = range;
      var params = new URLSearchParams(location.search); // the view stays in its URL
      params.set("range", range);
      history.replaceState(null, "", location.pathname + "?" + params + location.hash);
      document.querySelectorAll("[data-range]").forEach(function (b) {
        b.setAttribute("aria-pressed", b.dataset.range === range ? "true" : "false");
      });
      var box = document.getElementById("range-control");
      if (box) box.dataset.loading = "1";
      return load().then(function (h) {
        if (h.range !== state.range) return; // another click won
        state.markers = h.markers || [];
        state.slo = h.slo || {};
        charts.forEach(function (el) { T.setSeries(el, h.series || { t: [] }, RANGE_MS[range]); });
        if (ratesEl && ratesEl.data) T.setSeries(ratesEl, h.rates || { t: [] }, RANGE_MS[range]);
        decorateAll();
        if (box) { delete box.dataset.loading; box.dataset.shown = range; }
      }).catch(function (e) { console.warn(e); if (box) delete box.dataset.loading; });
    }
    document.querySelectorAll("[data-range]").forEach(function (b) {
      b.addEventListener("click", function () { setRange(b.dataset.range); });
    });
    /* A configuration change (a new version on the socket): fetch the markers again. */
    function refreshMarkers() {
      load("markers,rates").then(function (h) {
        state.markers = h.markers || [];
        state.slo = h.slo || state.slo;
        if (ratesEl && ratesEl.data && !ratesEl._zoomed) T.setSeries(ratesEl, h.rates || { t: [] });
        decorateAll();
      }).catch(function (e) { console.warn(e); });
    }
    setInterval(function () {
      if (!document.hidden) refreshMarkers();
    }, RATES_MS);
    function addMarker(marker) {
      if (!marker) return;
      var known = state.markers.some(function (x) { return x.ts === marker.ts && x.text === marker.text; });
      if (known) return;
      state.markers = state.markers.concat([marker]);
      decorateAll();
    }
    /* The configuration in the header. A pipeline.update built before the change (the
       aggregator's registry is a few seconds behind) never rolls it back. A new version seen
       on the telemetry alone (a change pushed nowhere else) fetches the markers again. */
    function showConfig(c, pushed) {
      if (state.version !== null && c.version < state.version) return;
      var k = c.k_policy || {};
      T.setText(document, '[data-c="k"]', k.mode === "fixed" ? String(k.k) : String(k.mode || "—"));
      T.setText(document, '[data-c="max_verify_batch"]', String(c.max_verify_batch));
      T.setText(document, '[data-c="max_batch_wait_ms"]', String(c.max_batch_wait_ms));
      T.setText(document, '[data-c="version"]', String(c.version));
      if (!pushed && state.version !== null && c.version !== state.version) refreshMarkers();
      state.version = c.version;
    }

    var pointDue = T.every(2000);
    var barsDue = T.every(1000);
    function onStats(ts, stats, nodes, last, summary) {
      updateKpis(stats || {}, last, state.slo);
      if (barsDue()) bars(stats || {});
      if (pointDue()) charts.forEach(function (el) { T.appendPoint(el, ts, stats || {}); });
      if (nodes) updateRows(nodes, summary);
    }
    if (live) {
      if (live.type === "pipeline.update") { bars(live.pipeline.stats || {}); updateRows(live.nodes, live.pipeline); }
      if (live.type === "node.update") bars(live.stats || {});
    }
    new T.LiveSocket(opts.socketPath, {
      subscribe: opts.subscribe,
      onMessage: function (m) {
        if (m.type === "pipeline.update") {
          onStats(m.ts, m.pipeline.stats, m.nodes, m.pipeline.last_measured, m.pipeline);
          if (m.config) showConfig(m.config, false);
        } else if (m.type === "config.change") {
          // pushed at commit by the service that made the change: the marker shows at once
          addMarker(m.marker);
          if (m.config && opts.kind === "pipeline") showConfig(m.config, true);
        } else if (m.type === "node.update") {
          onStats(m.ts, m.stats, null, m.last_measured);
          if (window.TandemNode) window.TandemNode(m.node);
        }
      },
    });
  }

  window.TandemCharts = { page: page };
})();

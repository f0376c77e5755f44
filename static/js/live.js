/* Tandem live console: one websocket with reconnect, formatting, and chart helpers.
   Used by fleet.js, pipeline.js, node.js and wall.js. No framework; Plotly for charts. */
(function () {
  "use strict";

  var COLORS = {
    accept: "#3ecf8e",
    alpha: "#f08cf7", // α beside acceptance on one chart: a hue apart from its green, dashed
    length: "#7aa2ff",
    tokens: "#7aa2ff",
    batch: "#f5a524",
    p50: "#f5a524",
    p99: "#f25f5c",
    draft: "#b48cff",
    verify: "#4cc9f0",
    power: "#e3e7ef",
    tpj: "#3ecf8e",
    util: "#4cc9f0",
    marker: "#e3e7ef",
    sim: "#c9ced8", // simulated nodes: a neutral dotted line, apart from the real ones
    grid: "#232a38",
    text: "#8b95a7",
  };

  function fmt(value, digits, unit) {
    if (value === null || value === undefined || Number.isNaN(value)) return "—";
    var d = digits === undefined ? 1 : digits;
    var v = Number(value);
    var s;
    if (Math.abs(v) >= 1e6) s = (v / 1e6).toFixed(2) + "M";
    else if (Math.abs(v) >= 1e4) s = (v / 1e3).toFixed(1) + "k";
    else s = v.toFixed(d);
    return unit ? s + " " + unit : s;
  }
  function pct(value, digits) {
    if (value === null || value === undefined) return "—";
    return (value * 100).toFixed(digits === undefined ? 1 : digits) + "%";
  }
  function watts(value) {
    if (value === null || value === undefined) return "—";
    if (value >= 10000) return (value / 1000).toFixed(1) + " kW";
    return value.toFixed(0) + " W";
  }
  /* "measured-nvml" | "measured" -> measured; "modeled" -> modeled; "mixed" -> partly modeled */
  function sourcePill(source) {
    if (!source) return "";
    if (source.indexOf("measured") === 0) {
      var sensor = source.indexOf("-") > 0 ? " · " + source.split("-")[1].toUpperCase() : "";
      return '<span class="pill pill-measured" title="Measured power">measured' + sensor + "</span>";
    }
    if (source === "mixed")
      return '<span class="pill pill-modeled" title="Part of this power is modeled from hardware profiles">partly modeled</span>';
    return '<span class="pill pill-modeled" title="Modeled from the hardware profile and utilization">modeled</span>';
  }
  /* "1 drafter", "2 drafters" */
  function plural(n, word, many) {
    var count = Number(n) || 0;
    return count + " " + (count === 1 ? word : many || word + "s");
  }
  /* An age in seconds as people say it: "12 s ago", "5 min ago", "3 h ago". */
  function ago(seconds) {
    var s = Math.max(0, Math.round(seconds || 0));
    return s < 120 ? s + " s ago" : s < 7200 ? Math.round(s / 60) + " min ago" : Math.round(s / 3600) + " h ago";
  }
  function esc(text) {
    return String(text === null || text === undefined ? "" : text).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function setText(root, selector, text) {
    var els = (root || document).querySelectorAll(selector);
    for (var i = 0; i < els.length; i++) if (els[i].textContent !== text) els[i].textContent = text;
  }
  function setHTML(root, selector, html) {
    var els = (root || document).querySelectorAll(selector);
    for (var i = 0; i < els.length; i++) if (els[i].innerHTML !== html) els[i].innerHTML = html;
  }

  var STALE_S = 5; // seconds without a newer aggregator stamp before the figures are "stale"

  /* A websocket that comes back: exponential backoff with jitter (0.5 s .. 15 s), a watchdog
     that reconnects when the server goes quiet (half-open TCP), and re-subscription. */
  function LiveSocket(path, options) {
    this.path = path;
    this.options = options || {};
    this.attempt = 0;
    this.lastMessage = 0;
    this.stopped = false;
    this.connect();
    var self = this;
    this.lastTs = 0;
    this.lastFresh = Date.now();
    this.watchdog = setInterval(function () {
      if (!self.ws || self.ws.readyState !== 1) return;
      if (Date.now() - self.lastMessage > 8000) {
        self.ws.close(); // half-open connection: start over
        return;
      }
      // judged unrounded, as a frame's age is in onmessage (rounded, "stale" came at 4.5 s
      // while a frame 4.8 s old still counted as fresh and turned the page live again)
      var quiet = (Date.now() - self.lastFresh) / 1000;
      if (quiet >= STALE_S) self.status("stale", "no fresh telemetry for " + Math.round(quiet) + " s");
    }, 1000);
  }
  LiveSocket.prototype.status = function (state, detail) {
    this.state = state;
    var el = document.getElementById("live-status");
    if (el) {
      el.className = "live-status live-" + state;
      el.querySelector(".live-label").textContent = detail;
    }
    if (this.options.onStatus) this.options.onStatus(state, detail);
  };
  LiveSocket.prototype.connect = function () {
    var self = this;
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var ws;
    try {
      ws = this.options.protocols
        ? new WebSocket(scheme + location.host + this.path, this.options.protocols)
        : new WebSocket(scheme + location.host + this.path);
    } catch (e) {
      this.retry();
      return;
    }
    this.ws = ws;
    this.status("connecting", this.attempt ? "reconnecting…" : "connecting…");
    ws.onopen = function () {
      self.attempt = 0;
      self.lastMessage = Date.now();
      // Connected is not live: after a reconnect the numbers are live again only once a fresh
      // stamp arrives (the first connection gets the usual grace before "stale").
      var quiet = (Date.now() - self.lastFresh) / 1000;
      if (!self.lastTs) self.lastFresh = Date.now();
      if (self.lastTs && quiet >= STALE_S) self.status("stale", "no fresh telemetry for " + Math.round(quiet) + " s");
      else self.status("live", "live");
      (self.options.subscribe || []).forEach(function (sub) {
        ws.send(JSON.stringify(Object.assign({ action: "subscribe" }, sub)));
      });
    };
    ws.onmessage = function (event) {
      self.lastMessage = Date.now();
      var message;
      try {
        message = JSON.parse(event.data);
      } catch (e) {
        return;
      }
      if (message.ts && message.ts > self.lastTs) {
        // The aggregator stamps every push. A newer stamp is live only if it is also recent: a
        // reconnect is answered with the last push the server holds, which after the
        // aggregator died is newer than what this page saw yet already seconds old. Its age is
        // judged against the freshest stamp seen (the smallest lag), which absorbs the clock
        // difference between the server and this browser.
        var lag = Date.now() / 1000 - message.ts;
        if (self.minLag === undefined || lag < self.minLag) self.minLag = lag;
        var age = lag - self.minLag;
        self.lastTs = message.ts;
        if (age < STALE_S) {
          self.lastFresh = Date.now() - age * 1000;
          if (self.state !== "live") self.status("live", "live");
        }
      }
      if (message.type === "error") {
        console.warn("live:", message.detail);
        return;
      }
      if (self.options.onMessage) self.options.onMessage(message);
    };
    ws.onclose = function (event) {
      if (self.stopped) return;
      self.denied = event.code === 4401 ? "signed out" : event.code === 4403 ? "access revoked" : null;
      if (self.denied) {
        if (self.options.onDenied) self.options.onDenied(event.code);
        if (self.options.finalDenial) {
          // the server said no (a wall link revoked or expired): final, said for good
          self.stop();
          self.status("denied", self.denied);
          return;
        }
        // keep trying slowly: a page should come back by itself once access is restored
        self.attempt = Math.max(self.attempt, 6);
      }
      self.retry();
    };
  };
  /* No more reconnecting: the socket, its watchdog and any pending retry end here. */
  LiveSocket.prototype.stop = function () {
    this.stopped = true;
    clearInterval(this.watchdog);
    clearTimeout(this.timer);
    if (this.ws && this.ws.readyState < 2) this.ws.close();
  };
  LiveSocket.prototype.retry = function () {
    var self = this;
    var base = Math.min(15000, 500 * Math.pow(2, this.attempt));
    var delay = base / 2 + Math.random() * base / 2;
    this.attempt += 1;
    if (this.ws && this.ws.readyState !== 3) return;
    var wait = Math.ceil(delay / 1000) + " s";
    if (this.denied) this.status("denied", this.denied + " · retrying in " + wait);
    else this.status("down", "reconnecting in " + wait);
    clearTimeout(this.timer);
    this.timer = setTimeout(function () {
      self.connect();
    }, delay);
  };

  /* Plotly helpers: one dark layout, time axes, appending live points. */
  function layout(extra) {
    var base = {
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      font: { color: COLORS.text, size: 11, family: "-apple-system, Segoe UI, Roboto, sans-serif" },
      margin: { l: 44, r: 12, t: 8, b: 28 },
      xaxis: { type: "date", tickformatstops: [{ dtickrange: [null, 60000], value: "%H:%M:%S" }, { dtickrange: [60000, null], value: "%H:%M" }], hoverformat: "%H:%M:%S", gridcolor: COLORS.grid, zeroline: false, linecolor: COLORS.grid },
      yaxis: { gridcolor: COLORS.grid, zeroline: false, rangemode: "tozero", linecolor: COLORS.grid },
      showlegend: false,
      legend: { orientation: "h", x: 0, y: 1.15, font: { size: 11 } },
      hovermode: "x unified",
    };
    return Object.assign(base, extra || {});
  }
  var CONFIG = { displayModeBar: false, responsive: true };
  var WINDOW_MS = 30 * 60 * 1000;
  /* The chosen range (el._windowMs). Until one is chosen, no more than the history there is
     (a fresh fleet fills the chart). */
  function xRange(el) {
    var now = Date.now();
    var start = now - (el._windowMs || WINDOW_MS);
    if (!el._explicit) {
      if (el._first !== null && el._first !== undefined) start = Math.max(start, el._first - 60000);
      else start = now - 60000;
    }
    return [new Date(start), new Date(now + 5000)];
  }

  function times(series) {
    return (series.t || []).map(function (t) {
      return new Date(t * 1000);
    });
  }
  /* Traces are drawn side by side, never stacked: "verification" is the verifiers' power,
     not drafting + verification. A trace may read another series (tr.from: "rates"). */
  function traceData(series, traces) {
    var x = times(series);
    return traces.map(function (tr) {
      return {
        x: x.slice(),
        y: (series[tr.key] || []).map(function (v) {
          return v === null || v === undefined ? null : v * (tr.scale || 1);
        }),
        name: tr.name,
        type: "scatter",
        mode: "lines",
        yaxis: tr.axis || "y",
        // straight segments between measured points: a spline overshoots sparse ones (a dip
        // below zero, a peak that was never measured)
        line: { color: tr.color, width: 2, shape: "linear", dash: tr.dash || "solid" },
        fill: tr.fill || "none",
        fillcolor: tr.fillcolor,
        connectgaps: false,
        hovertemplate: "%{y:.3~f}" + (tr.unit ? " " + tr.unit : "") + "<extra>" + tr.name + "</extra>",
      };
    });
  }
  function lineChart(el, series, traces, extraLayout) {
    if (!el || !window.Plotly) return null;
    var data = traceData(series, traces);
    var x = data.length ? data[0].x : [];
    el._first = x.length ? x[0].getTime() : null;
    if (!el._windowMs) el._windowMs = WINDOW_MS;
    var extra = Object.assign({ showlegend: traces.length > 1 }, extraLayout);
    extra.xaxis = Object.assign({}, layout().xaxis, extra.xaxis || {}, { range: xRange(el) });
    extra.yaxis = Object.assign({}, layout().yaxis, extra.yaxis || {});
    // a right-hand axis gets the room its tick labels need (they were cut off at the edge)
    if (extra.yaxis2 || traces.some(function (tr) { return tr.axis === "y2"; })) {
      extra.yaxis2 = Object.assign({ overlaying: "y", side: "right" }, extra.yaxis2 || {});
      var margin = Object.assign({}, layout().margin, extra.margin || {});
      margin.r = Math.max(margin.r, 48);
      extra.margin = margin;
    }
    Plotly.newPlot(el, data, layout(extra), CONFIG);
    el._traces = traces;
    el._decor = { shapes: [], annotations: [] };
    // Plotly's own zoom (drag a box; double-click resets): while zoomed, live points do not
    // move the window under the operator's feet
    el.on("plotly_relayout", function (ev) {
      if (el._selfRelayout) return;
      if (ev["xaxis.range[0]"] || ev["xaxis.range"]) el._zoomed = true;
      if (ev["xaxis.autorange"]) {
        el._zoomed = false;
        relayout(el, { "xaxis.range": xRange(el) });
      }
    });
    return el;
  }
  function relayout(el, update) {
    el._selfRelayout = true;
    try {
      Plotly.relayout(el, update);
    } finally {
      el._selfRelayout = false;
    }
  }
  /* Replace a chart's history (a new time range) and set its window. */
  function setSeries(el, series, windowMs) {
    if (!el || !el._traces || !window.Plotly) return;
    var data = traceData(series, el._traces);
    el._first = data.length && data[0].x.length ? data[0].x[0].getTime() : null;
    if (windowMs) {
      el._windowMs = windowMs;
      el._explicit = true;
    }
    el._zoomed = false;
    var lay = Object.assign({}, el.layout);
    lay.xaxis = Object.assign({}, el.layout.xaxis, { range: xRange(el), autorange: false });
    el._selfRelayout = true;
    try {
      Plotly.react(el, data, lay, CONFIG);
    } finally {
      el._selfRelayout = false;
    }
  }
  /* Vertical markers for configuration changes (who changed what, on hover) and horizontal
     reference lines (SLOs), drawn as layout shapes with labelled annotations. */
  function decorate(el, markers, refs) {
    if (!el || !el.data || !window.Plotly) return;
    var shapes = [];
    var notes = [];
    (refs || []).forEach(function (r) {
      if (r.y === null || r.y === undefined) return;
      shapes.push({ type: "line", name: "ref:" + r.key, xref: "paper", x0: 0, x1: 1, yref: "y", y0: r.y, y1: r.y,
        line: { color: r.color || COLORS.p99, width: 1.5, dash: "dash" } });
      notes.push({ xref: "paper", x: 1, xanchor: "right", yref: "y", y: r.y, yanchor: "bottom", showarrow: false,
        text: esc(r.label), font: { size: 10, color: r.color || COLORS.p99 } });
    });
    (markers || []).forEach(function (m) {
      var when = new Date(m.ts * 1000);
      var time = when.toLocaleTimeString([], { hour12: false });
      shapes.push({ type: "line", name: "change", xref: "x", x0: when, x1: when, yref: "paper", y0: 0, y1: 1,
        line: { color: COLORS.marker, width: 1, dash: "dot" } });
      notes.push({ xref: "x", x: when, yref: "paper", y: 1, yanchor: "top", xanchor: "left", showarrow: false,
        text: "⚑", font: { size: 11, color: COLORS.marker }, name: "change",
        hovertext: esc(time + " · " + m.actor + " · " + m.text), captureevents: true });
    });
    el._decor = { shapes: shapes, annotations: notes };
    relayout(el, { shapes: shapes, annotations: notes });
  }
  function appendPoint(el, ts, stats) {
    if (!el || !el._traces || !window.Plotly || !el.data) return;
    var when = new Date(ts * 1000);
    var xs = [],
      ys = [],
      idx = [];
    el._traces.forEach(function (tr, i) {
      var v = stats[tr.key];
      xs.push([when]);
      ys.push([v === null || v === undefined ? null : v * (tr.scale || 1)]);
      idx.push(i);
    });
    var maxPoints = 3600 * 2;
    Plotly.extendTraces(el, { x: xs, y: ys }, idx, maxPoints);
    if (el._first === null || el._first === undefined) el._first = when.getTime();
    if (!el._zoomed) relayout(el, { "xaxis.range": xRange(el) });
  }
  function barChart(el, xs, ys, color, extraLayout) {
    if (!el || !window.Plotly) return;
    var data = [{ x: xs, y: ys, type: "bar", marker: { color: color }, hovertemplate: "%{x}: %{y:.3~f}<extra></extra>" }];
    var lay = layout(Object.assign({ xaxis: { type: "category", gridcolor: COLORS.grid, linecolor: COLORS.grid } }, extraLayout || {}));
    if (el.data) Plotly.react(el, data, lay, CONFIG);
    else Plotly.newPlot(el, data, lay, CONFIG);
  }
  /* Throttle: live points go on charts at most every `ms`. */
  function every(ms) {
    var last = 0;
    return function () {
      var now = Date.now();
      if (now - last < ms) return false;
      last = now;
      return true;
    };
  }
  function jsonScript(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }

  /* The window a live figure covers: the aggregator's live window while there is traffic,
     the rollup bucket a "last measured" figure comes from when there is none (data-live,
     data-rollup on each [data-window] label, rendered by the server). */
  function windowLabel(root, last) {
    (root || document).querySelectorAll("[data-window]").forEach(function (el) {
      var text = last ? el.dataset.rollup : el.dataset.live;
      if (text && el.textContent !== text) el.textContent = text;
    });
  }
  /* An SLO breach colours the figure: every [data-k=key] (and its KPI card) above slo[key]. */
  function sloBreach(root, stats, slo) {
    ["itl_p99_ms", "ttft_p99_ms"].forEach(function (key) {
      var limit = (slo || {})[key];
      var v = (stats || {})[key];
      var over = limit != null && v != null && v > limit;
      (root || document).querySelectorAll('[data-k="' + key + '"]').forEach(function (el) {
        el.classList.toggle("slo-breach", over);
        if (over) el.title = "above its SLO of " + fmt(limit, 0) + " ms";
        else el.removeAttribute("title");
        var card = el.closest(".kpi");
        if (card) card.classList.toggle("kpi-breach", !!card.querySelector(".slo-breach"));
      });
      (root || document).querySelectorAll('[data-slo-note="' + key + '"]').forEach(function (el) {
        var text = over ? "above SLO " + fmt(limit, 0) + " ms" : "";
        if (el.textContent !== text) el.textContent = text;
      });
    });
  }

  window.Tandem = {
    windowLabel: windowLabel,
    sloBreach: sloBreach,
    COLORS: COLORS,
    fmt: fmt,
    pct: pct,
    watts: watts,
    sourcePill: sourcePill,
    plural: plural,
    ago: ago,
    esc: esc,
    setText: setText,
    setHTML: setHTML,
    LiveSocket: LiveSocket,
    lineChart: lineChart,
    setSeries: setSeries,
    decorate: decorate,
    appendPoint: appendPoint,
    barChart: barChart,
    every: every,
    jsonScript: jsonScript,
  };
})();

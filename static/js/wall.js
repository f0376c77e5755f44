/* The monitoring wall: big numbers and charts for the fleet and each pipeline. Read-only,
   no clicks, reconnects by itself (LiveSocket backoff + watchdog).
   Opened with a wall link (/wall/screen/#token=...), the token stays out of every URL the
   server sees: the figures come from wall/data with the token in a header, and the socket
   carries it as a subprotocol. */
(function () {
  "use strict";
  var T = window.Tandem;
  var page = T.jsonScript("wall-data") || {};
  var token = new URLSearchParams(location.hash.replace(/^#/, "")).get("token");
  function wallData() {
    return fetch("/wall/data", { headers: { "X-Wall-Token": token }, credentials: "omit", cache: "no-store" });
  }
  /* Refused for good (the link revoked, expired or forged; signed out): the page's own
     message (#wall-denied, rendered by the server) with the server's reason, instead of the
     figures, and no more reconnecting. */
  function denied(detail) {
    document.body.classList.add("wall-denied");
    var box = document.getElementById("wall-denied");
    if (box) {
      box.hidden = false;
      if (detail) box.querySelector("[data-why]").textContent = detail;
    }
    var pill = document.getElementById("live-status");
    if (pill) {
      pill.className = "live-status live-denied";
      pill.querySelector(".live-label").textContent = "not authorised";
    }
  }
  function refusal(r) {
    return r.json().catch(function () { return {}; }).then(function (body) { return body.detail || null; });
  }
  if (page.screen && token) {
    wallData()
      .then(function (r) {
        if (r.status === 401 || r.status === 403) return refusal(r).then(function (why) { denied(why); return null; });
        return r.ok ? r.json() : {};
      })
      .catch(function () { return {}; })
      .then(function (data) { if (data) start(data, token); });
  } else if (page.screen) {
    denied(null); // a screen address without a wall link
  } else {
    start(page, null);
  }

  function start(data, token) {
    var C = T.COLORS;
    var pipes = document.getElementById("wall-pipes");
    var cards = {};
    var pointDue = T.every(2000);
    var lastCount = -1;
    var FIT_LEVELS = 5;

    /* No scrolling on a wall: the fleet charts and the cards share the screen (wall.css), and
       detail is dropped level by level while something does not fit: the page scrolls (a
       phone), a card cuts its figures off, or a chart or sparkline is too short to read. */
    var SPARK_MIN = 56; // px: shorter than this, a sparkline is a smear
    var CHART_MIN = 110;
    function tall(selector, min) {
      var els = document.querySelectorAll(selector);
      for (var i = 0; i < els.length; i++) {
        if (els[i].offsetParent !== null && els[i].getBoundingClientRect().height < min) return false;
      }
      return true;
    }
    function fits() {
      if (document.documentElement.scrollHeight > window.innerHeight + 2) return false;
      var boxes = document.querySelectorAll(".pipe-card, .wall-pipes");
      for (var i = 0; i < boxes.length; i++) {
        if (boxes[i].scrollHeight > boxes[i].clientHeight + 1) return false;
      }
      return tall(".pipe-spark", SPARK_MIN) && tall(".wall-charts .chart", CHART_MIN);
    }
    function fit() {
      var body = document.body;
      for (var i = 1; i <= FIT_LEVELS; i++) body.classList.remove("fit-" + i);
      for (var level = 1; level <= FIT_LEVELS; level++) {
        if (fits()) break;
        body.classList.add("fit-" + level);
      }
      // chart text grows with the screen too (11 px on a 4K wall is unreadable from a desk away)
      var size = Math.max(11, Math.min(26, Math.round(window.innerWidth / 150)));
      document.querySelectorAll(".js-plotly-plot").forEach(function (el) {
        if (el.offsetParent === null) return;
        if (el.layout && el.layout.font && el.layout.font.size !== size) {
          // and the margins that hold the tick labels, both axes (fixed: Plotly's automargin
          // redraws in a loop on live charts)
          Plotly.relayout(el, { "font.size": size, "margin.l": Math.round(size * 3.6), "margin.b": Math.round(size * 2.3),
            "margin.r": el.layout.yaxis2 ? Math.round(size * 4) : 12 });
        }
        Plotly.Plots.resize(el);
      });
    }
    /* A chart follows its box (Plotly's own resize follows the window only): the boxes share
       the screen, so a card that changes (a note appears, a pipeline is added) resizes them. */
    var boxes = window.ResizeObserver ? new ResizeObserver(function (entries) {
      entries.forEach(function (e) {
        var el = e.target;
        var h = el._fullLayout && el._fullLayout.height;
        if (el.offsetParent !== null && el.data && Math.abs((h || 0) - e.contentRect.height) > 1) Plotly.Plots.resize(el);
      });
    }) : null;
    function follow(el) { if (boxes && el) boxes.observe(el); }
    var refit = null;
    window.addEventListener("resize", function () {
      clearTimeout(refit);
      refit = setTimeout(fit, 100);
    });

    function clock() {
      var now = new Date();
      document.getElementById("clock").textContent = now.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
    }
    clock();
    setInterval(clock, 1000);

    /* The fleet charts draw the real nodes; simulated nodes, when there are any, get their
       own dotted line on a right-hand axis labelled "simulated" (never summed in). */
    var fleetSeries = data.fleet_series || { t: [] };
    var liveSim = (data.live || {}).kpis_simulated || {};
    function any(key, now) {
      return (now || 0) > 0 || (fleetSeries[key] || []).some(function (v) { return v > 0; });
    }
    var simAxis = { overlaying: "y", side: "right", rangemode: "tozero", gridcolor: "rgba(0,0,0,0)", color: C.sim,
      title: { text: "simulated", font: { color: C.sim, size: 12 } } };
    var big = { font: { color: C.text, size: 13 } };
    var tokenTraces = [{ key: "tokens_per_s", name: "tokens/s · real nodes", color: C.tokens, fill: "tozeroy", fillcolor: "rgba(122,162,255,0.14)" }];
    var powerTraces = [
      { key: "power_draft_w", name: "drafting", color: C.draft, unit: "W" },
      { key: "power_verify_w", name: "verification", color: C.verify, unit: "W" },
    ];
    var simTokens = any("simulated_tokens_per_s", liveSim.tokens_per_s);
    var simPower = any("simulated_power_w", liveSim.power_w);
    if (simTokens) tokenTraces.push({ key: "simulated_tokens_per_s", name: "simulated nodes", color: C.sim, dash: "dot", axis: "y2" });
    if (simPower) powerTraces.push({ key: "simulated_power_w", name: "simulated nodes", color: C.sim, dash: "dot", axis: "y2", unit: "W" });
    function simLayout(on) { return on ? { yaxis2: simAxis, margin: { l: 44, r: 52, t: 8, b: 28 } } : {}; }
    var chTokens = T.lineChart(document.getElementById("w-tokens"), fleetSeries, tokenTraces, Object.assign({}, big, simLayout(simTokens)));
    var chPower = T.lineChart(document.getElementById("w-power"), fleetSeries, powerTraces, Object.assign({}, big, simLayout(simPower)));
    follow(chTokens);
    follow(chPower);
    /* A live point: the real nodes' headline figures, the simulated ones apart. */
    function fleetPoint(k, ks) {
      return {
        tokens_per_s: k.tokens_per_s,
        power_draft_w: k.power_draft_w,
        power_verify_w: k.power_verify_w,
        simulated_tokens_per_s: ks.nodes ? ks.tokens_per_s : null,
        simulated_power_w: ks.nodes ? ks.power_w : null,
      };
    }

    function card(p) {
      var el = document.createElement("div");
      el.className = "pipe-card";
      el.dataset.id = p.id;
      el.innerHTML =
        '<h2><span class="name"></span><span class="sim"></span><span class="nodes"></span></h2>' +
        '<div class="pipe-nums">' +
        '<div><div class="label">tokens/s</div><div class="value tokens" data-p="tps"></div></div>' +
        '<div><div class="label">acceptance</div><div class="value accept" data-p="acc"></div></div>' +
        '<div><div class="label">mean length</div><div class="value" data-p="mal"></div></div>' +
        '<div><div class="label">batch</div><div class="value" data-p="batch"></div></div>' +
        '<div><div class="label">ITL p99</div><div class="value" data-p="itl"></div></div>' +
        '<div><div class="label">power</div><div class="value" data-p="power"></div></div>' +
        '<div><div class="label">tokens/J</div><div class="value" data-p="tpj"></div></div>' +
        '<div><div class="label">power is</div><div data-p="src"></div></div>' +
        "</div>" +
        '<div class="pipe-last" data-p="last"></div>' +
        '<div class="pipe-spark"></div>';
      pipes.appendChild(el);
      var series = (data.pipeline_series || {})[String(p.id)] || { t: [] };
      var spark = el.querySelector(".pipe-spark");
      T.lineChart(spark, series, [
        { key: "tokens_per_s", name: "tokens/s", color: C.tokens, fill: "tozeroy", fillcolor: "rgba(122,162,255,0.12)" },
        { key: "acceptance_rate", name: "acceptance %", color: C.accept, scale: 100, unit: "%" },
      ], { margin: { l: 40, r: 40, t: 4, b: 22 }, showlegend: false });
      // acceptance on its own axis (0..100 %)
      if (spark.data) {
        Plotly.restyle(spark, { yaxis: "y2" }, [1]);
        Plotly.relayout(spark, { yaxis2: { overlaying: "y", side: "right", range: [0, 100], dtick: 25, ticksuffix: "%", gridcolor: "rgba(0,0,0,0)", color: C.accept } });
      }
      follow(spark);
      cards[p.id] = { el: el, spark: spark };
      return cards[p.id];
    }

    function fillCard(c, p, ts, addPoint) {
      var s = p.stats || {};
      T.setText(c.el, ".name", p.name);
      T.setHTML(c.el, ".sim", p.simulated ? '<span class="pill pill-simulated">simulated</span>' : "");
      T.setText(c.el, ".nodes", T.plural(p.drafters, "drafter") + " · " + T.plural(p.verifiers, "verifier"));
      T.setText(c.el, '[data-p="tps"]', T.fmt(s.tokens_per_s, 0));
      var last = s.acceptance_rate == null ? p.last_measured : null; // no traffic now
      T.setText(c.el, '[data-p="acc"]', T.pct((last || s).acceptance_rate, 0));
      T.setText(c.el, '[data-p="mal"]', T.fmt((last || s).mean_acceptance_length, 2));
      T.setText(c.el, '[data-p="last"]', last ? "acceptance and mean length: last measured " + T.ago(last.age_s) : "");
      T.setText(c.el, '[data-p="batch"]', T.fmt(s.batch_mean, 1));
      T.setText(c.el, '[data-p="itl"]', s.itl_p99_ms == null ? "—" : T.fmt(s.itl_p99_ms, 0) + " ms");
      T.setText(c.el, '[data-p="power"]', T.watts(s.power_w));
      T.setText(c.el, '[data-p="tpj"]', T.fmt(s.tokens_per_j, 2));
      T.setHTML(c.el, '[data-p="src"]', T.sourcePill(s.power_source) || '<span class="dim">no data</span>');
      if (addPoint) T.appendPoint(c.spark, ts, s);
    }

    function states(st) {
      return Object.keys(st || {}).sort().map(function (k) {
        return '<span class="badge state-' + T.esc(k) + '">' + st[k] + " " + T.esc(k) + "</span>";
      }).join(" ");
    }

    function onFleet(m, addPoint) {
      var t = m.totals || {};
      var k = m.kpis || {}; // the headline: real nodes only
      var ks = m.kpis_simulated || {};
      var last = k.acceptance_rate == null ? k.last_measured : null; // no traffic now
      var simPill = '<span class="pill pill-simulated">simulated</span> ';
      var root = document.getElementById("wall-kpis");
      T.setText(root, '[data-w="tps"]', T.fmt(k.tokens_per_s, 0));
      T.setText(root, '[data-w="power"]', T.watts(k.power_w));
      T.setHTML(root, '[data-w="power_src"]', (T.sourcePill(k.power_source) || "no live power data") + (ks.nodes ? " " + simPill + T.watts(ks.power_w) : ""));
      T.setText(root, '[data-w="tpj"]', T.fmt(k.tokens_per_j, 3));
      T.setText(root, '[data-w="tpj_d"]', T.fmt(k.tokens_per_j_draft, 2));
      T.setText(root, '[data-w="tpj_v"]', T.fmt(k.tokens_per_j_verify, 2));
      T.setHTML(root, '[data-w="tpj_src"]', T.sourcePill(k.power_source)); // modeled power: modeled tokens/J
      T.setText(root, '[data-w="acc"]', T.pct((last || k).acceptance_rate));
      T.setText(root, '[data-w="mal"]', T.fmt((last || k).mean_acceptance_length, 2));
      T.setText(root, '[data-w="alpha"]', T.fmt((last || k).alpha, 2));
      T.setHTML(root, '[data-w="acc_last"]', last ? " · last measured " + T.ago(last.age_s) : "");
      T.windowLabel(root, last);
      var real = k.states || t.states; // the real nodes, as every headline; simulated apart
      T.setText(root, '[data-w="online"]', String((real || {}).online || 0));
      T.setText(root, '[data-w="nodes"]', String(k.nodes != null ? k.nodes : t.nodes || 0));
      T.setHTML(root, '[data-w="states"]', states(real));
      T.setHTML(root, '[data-w="nodes_sim"]', ks.nodes ? simPill + ((ks.states || {}).online || 0) + " of " + ks.nodes + " online, not included" : "");
      T.setHTML(root, '[data-w="sim"]', ks.nodes ? simPill + T.fmt(ks.tokens_per_s, 0) + " tok/s on " + T.plural(ks.nodes, "simulated node") + " not included" : "");
      if (addPoint) {
        var point = fleetPoint(k, ks);
        T.appendPoint(chTokens, m.ts, point);
        T.appendPoint(chPower, m.ts, point);
      }
      var seen = {};
      (m.pipelines || []).forEach(function (p) {
        var c = cards[p.id] || card(p);
        fillCard(c, p, m.ts, addPoint);
        seen[p.id] = true;
      });
      Object.keys(cards).forEach(function (id) {
        if (!seen[id]) {
          cards[id].el.remove();
          delete cards[id];
        }
      });
      var count = (m.pipelines || []).length;
      document.getElementById("wall-empty").hidden = count > 0;
      if (count !== lastCount) {
        lastCount = count;
        fit();
      }
    }

    /* A screen that cannot vouch for its numbers goes dark at once and says why: its link
       revoked, the server gone, or no fresh telemetry. Live again: full brightness. */
    var DARK = { denied: true, down: true, stale: true };
    function dim(state, detail) {
      var note = document.getElementById("wall-dark");
      if (DARK[state]) {
        document.body.classList.add("wall-dark");
        if (note) {
          note.hidden = false;
          note.querySelector(".why").textContent =
            state === "denied" ? "This wall link was revoked or has expired: the figures below are no longer live."
              : state === "down" ? "Lost the connection to Tandem: the figures below are frozen."
                : "No fresh telemetry: the figures below are not current.";
          note.querySelector(".detail").textContent = detail;
        }
      } else if (state === "live") {
        document.body.classList.remove("wall-dark");
        if (note) note.hidden = true;
      }
    }

    if (data.live) onFleet(data.live, false);
    // a protocol name may not hold ":" (the token's separator): it travels as "."
    var protocols = token ? ["tandem.wall", "tandem.wall-token." + token.replace(/:/g, ".")] : null;
    new T.LiveSocket("/ws/wall/", {
      protocols: protocols,
      finalDenial: true,
      onDenied: function (code) {
        if (!token) return denied(code === 4401 ? "Signed out: sign in again to see the wall." : "You may no longer view the wall.");
        denied(null);
        wallData().then(function (r) { return r.ok ? null : refusal(r); }).then(function (why) { if (why) denied(why); })
          .catch(function () {});
      },
      onStatus: dim,
      onMessage: function (m) {
        if (m.type === "fleet.update") onFleet(m, pointDue());
      },
    });
  }
})();

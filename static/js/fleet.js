/* Fleet page: the headline figures and the node table, live, for fleets of any size.

   The socket's fleet feed (fleet/telemetry/deltas.py) sends a snapshot of every row once,
   then one delta per tick: rows added or changed, ids gone, the headline figures, and the
   live figures of the rows this page SHOWS. The table is virtual: only the rows in view
   (plus a margin) exist in the DOM, whatever the fleet's size; filtering runs over the rows
   in memory. After each render the page tells the server which rows it shows
   ({"action": "view"}); a delta that does not follow the last one (a gap, a new publisher)
   makes it ask for a new snapshot ({"action": "snapshot"}). Sorted by a live figure, the page
   also gets that figure of every node every 5 s (static/js/fleet_sort.js). */
(function () {
  "use strict";
  var T = window.Tandem;
  var table = document.getElementById("nodes");
  var tbody = table.querySelector("tbody");
  var wrap = table.closest(".table-wrap");
  var form = document.getElementById("filters");
  var FIELDS = ["id", "name", "state", "role", "pipeline", "sim", "kind"];
  var OVERSCAN = 10; // rows rendered above and below the visible ones
  var rowH = 41; // px; measured from the first rendered row
  var PAGE_ROWS = 40; // rows the visible window holds when the wrap has no height yet
  form.addEventListener("submit", function (e) { e.preventDefault(); }); // filters apply live
  // the table scrolls in its card, its header stays (styles from script: CSP allows those)
  wrap.style.maxHeight = "72vh";
  wrap.style.overflowY = "auto";
  table.querySelectorAll("thead th").forEach(function (th) {
    th.style.position = "sticky";
    th.style.top = "0";
    th.style.zIndex = "1";
    th.style.background = "var(--bg-card)";
  });
  // server-rendered utilization bars: widths from data attributes (no inline styles, CSP)
  document.querySelectorAll(".bar > span[data-width]").forEach(function (el) {
    el.style.width = el.dataset.width + "%";
  });
  var pipelineNames = {};
  document.querySelectorAll('#filters select[name="pipeline"] option').forEach(function (o) {
    if (o.value) pipelineNames[o.value] = o.textContent;
  });

  // --- the rows in memory -------------------------------------------------------------------
  var rows = null; // id -> {id, name, state, role, pipeline, sim, kind, fig}; null before a snapshot
  var order = []; // the rows that pass the filters, sorted
  var feed = { epoch: null, seq: null, asked: 0 };
  var serverNow = 0; // the aggregator's clock (ages are counted on it, not the browser's)

  function rowOf(list) {
    var r = {};
    for (var i = 0; i < FIELDS.length; i++) r[FIELDS[i]] = list[i];
    return r;
  }
  function setRow(list) {
    var r = rowOf(list);
    var old = rows[r.id];
    if (old) r.fig = old.fig;
    rows[r.id] = r;
  }
  function applyFigs(figs) {
    if (!figs || !rows) return;
    Object.keys(figs).forEach(function (id) {
      if (rows[id]) rows[id].fig = figs[id];
    });
  }

  function filters() {
    var data = new FormData(form);
    return {
      q: (data.get("q") || "").toLowerCase(),
      state: data.get("state"),
      role: data.get("role"),
      pipeline: data.get("pipeline"),
      sim: data.get("sim"),
    };
  }
  /* The order: static/js/fleet_sort.js (its headers, the URL, the live figures' columns). */
  var sorter = window.TandemFleetSort(table, {
    pipelineName: function (id) { return pipelineNames[id] || "#" + id; },
    send: function (message) { return send(message); },
    syncUrl: function () { syncUrl(); },
    onChange: function () {
      refilter();
      wrap.scrollTop = 0;
      render();
    },
    onReorder: function () {
      refilter();
      render();
    },
  });
  /* The view in the URL (filters and sort), so it can be shared or reloaded as it is. */
  function syncUrl() {
    var params = new URLSearchParams();
    new FormData(form).forEach(function (v, k) {
      if (v) params.set(k, v);
    });
    sorter.toParams(params);
    history.replaceState(null, "", location.pathname + (params.toString() ? "?" + params : ""));
  }
  function refilter() {
    if (!rows) return;
    var f = filters();
    var out = [];
    for (var id in rows) {
      var r = rows[id];
      if (f.q && r.name.toLowerCase().indexOf(f.q) < 0) continue;
      if (f.state && r.state !== f.state) continue;
      if (f.role && (r.role || "none") !== f.role) continue;
      if (f.pipeline && String(r.pipeline || "") !== f.pipeline) continue;
      if (f.sim && (f.sim === "sim") !== !!r.sim) continue;
      out.push(r);
    }
    out.sort(sorter.compare);
    order = out;
    T.setText(document, "#shown", String(order.length));
    T.setText(document, "#total", String(Object.keys(rows).length));
  }

  // --- the virtual table ----------------------------------------------------------------------
  var topPad = document.createElement("tr");
  var bottomPad = document.createElement("tr");
  topPad.className = bottomPad.className = "vpad";
  topPad.innerHTML = bottomPad.innerHTML = '<td colspan="10"></td>';
  topPad.setAttribute("aria-hidden", "true");
  bottomPad.setAttribute("aria-hidden", "true");
  var pool = []; // the <tr> elements in use, in order
  var shownIds = [];

  function newTr() {
    var tr = document.createElement("tr");
    tr.innerHTML =
      '<td class="c-name"></td><td class="c-state"></td><td class="c-role"></td><td class="c-pipe"></td>' +
      '<td class="num c-power"></td><td class="c-util"><span class="bar"><span></span></span><span class="v"></span></td>' +
      '<td class="num c-batch"></td><td class="num c-tps"></td><td class="num c-acc"></td><td class="num c-seen dim"></td>';
    if (measured) tr.style.height = rowH + "px";
    return tr;
  }
  function cell(tr, cls) {
    return tr.querySelector("." + cls);
  }
  function put(el, html) {
    if (el && el.innerHTML !== html) el.innerHTML = html;
  }
  function fill(tr, r) {
    var fig = r.fig || [];
    var power = fig[0], src = fig[1], util = fig[2], batch = fig[3], tps = fig[4], acc = fig[5], seen = fig[6];
    if (tr.dataset.id !== String(r.id)) tr.dataset.id = r.id;
    tr.dataset.state = r.state;
    tr.dataset.role = r.role || "none";
    tr.dataset.pipeline = r.pipeline || "";
    tr.dataset.sim = r.sim ? "1" : "0";
    tr.dataset.name = r.name;
    put(cell(tr, "c-name"), '<a href="/nodes/' + r.id + '/">' + T.esc(r.name) + "</a>" +
      ' <span class="dim small">' + T.esc(r.kind || "") + "</span>" +
      (r.sim ? ' <span class="pill pill-simulated">simulated</span>' : ""));
    put(cell(tr, "c-state"), '<span class="badge state-' + T.esc(r.state) + '">' + T.esc(r.state) + "</span>");
    put(cell(tr, "c-role"), r.role ? T.esc(r.role) : "—");
    put(cell(tr, "c-pipe"), r.pipeline ? '<a href="/pipelines/' + r.pipeline + '/">' + T.esc(pipelineNames[r.pipeline] || "#" + r.pipeline) + "</a>" : '<span class="dim">—</span>');
    put(cell(tr, "c-power"), T.watts(power) + " " + T.sourcePill(src));
    var u = cell(tr, "c-util");
    var width = (util ? Math.round(util * 100) : 0) + "%";
    var bar = u.querySelector(".bar > span");
    if (bar.style.width !== width) bar.style.width = width;
    T.setText(u, ".v", T.pct(util, 0));
    put(cell(tr, "c-batch"), T.fmt(batch, 1));
    put(cell(tr, "c-tps"), r.role === "draft" && !tps ? '<span class="dim" title="Drafters deliver no tokens themselves: their verifiers do">—</span>' : T.fmt(tps, 1));
    put(cell(tr, "c-acc"), T.pct(acc));
    put(cell(tr, "c-seen"), seen === null || seen === undefined ? "never" : Math.max(0, Math.round(serverNow - seen)) + " s ago");
  }

  function windowRange() {
    var visible = wrap.clientHeight ? Math.ceil(wrap.clientHeight / rowH) : PAGE_ROWS;
    var span = visible + 2 * OVERSCAN;
    // clamped: the scroll position may be past the end of a list that just got shorter
    var first = Math.max(0, Math.min(Math.floor(wrap.scrollTop / rowH) - OVERSCAN, order.length - span));
    var last = Math.min(order.length, first + span);
    return [first, last];
  }

  function render() {
    if (!rows) return;
    var range = windowRange();
    var first = range[0], last = range[1];
    var n = last - first;
    while (pool.length < n) pool.push(newTr());
    while (pool.length > n) pool.pop().remove();
    if (topPad.parentNode !== tbody) {
      tbody.textContent = ""; // the server-rendered first rows give way to the live table
      tbody.appendChild(topPad);
      tbody.appendChild(bottomPad);
    }
    topPad.firstChild.style.height = first * rowH + "px";
    bottomPad.firstChild.style.height = (order.length - last) * rowH + "px";
    topPad.hidden = first === 0;
    bottomPad.hidden = last >= order.length;
    var ids = [];
    for (var i = 0; i < n; i++) {
      var tr = pool[i];
      fill(tr, order[first + i]);
      ids.push(order[first + i].id);
    }
    // keep the pooled rows in order after the top pad
    var anchor = topPad;
    for (var j = 0; j < n; j++) {
      if (anchor.nextSibling !== pool[j]) tbody.insertBefore(pool[j], anchor.nextSibling);
      anchor = pool[j];
    }
    var empty = tbody.querySelector(".empty-row");
    if (!order.length && !empty) {
      var tr0 = document.createElement("tr");
      tr0.className = "empty-row";
      tr0.innerHTML = '<td colspan="10" class="empty">' + (Object.keys(rows).length ? "No node matches these filters." : 'No nodes yet. Register one on the <a href="/nodes/">nodes page</a>, or start the simulator.') + "</td>";
      tbody.insertBefore(tr0, bottomPad);
    } else if (order.length && empty) {
      empty.remove();
    }
    shownIds = ids;
    // a row whose content outgrew the height (a wrapped pill, a longer figure): measure again
    for (var k = 0; measured && k < n; k++) if (pool[k].scrollHeight > rowH + 1) measured = false;
    if (n) measure();
    sendView();
  }
  /* The real height of a row (fonts, pills; a table row on wide screens, a card on a phone)
     becomes the table's row height: the tallest of the rows shown, measured without the height
     the table gives them (else a phone's cards keep a table row's 41 px and overlap). Measured
     again when the layout may change (a resize, a rotated phone) or a row outgrows it. */
  var measured = false;
  function measure() {
    if (measured || !pool.length) return;
    measured = true;
    var h = 0;
    pool.forEach(function (p) { p.style.height = ""; });
    pool.forEach(function (p) { h = Math.max(h, Math.ceil(p.getBoundingClientRect().height)); });
    var changed = h > 0 && h !== rowH;
    if (h > 0) rowH = h;
    pool.forEach(function (p) { p.style.height = rowH + "px"; });
    if (changed) render();
  }

  var scrollQueued = false;
  wrap.addEventListener("scroll", function () {
    if (scrollQueued) return;
    scrollQueued = true;
    requestAnimationFrame(function () {
      scrollQueued = false;
      render();
    });
  });
  window.addEventListener("resize", function () {
    measured = false;
    render();
  });

  // --- what the server sends ------------------------------------------------------------------
  var socket;
  var viewSent = "";
  function send(message) {
    if (socket && socket.ws && socket.ws.readyState === 1) {
      socket.ws.send(JSON.stringify(message));
      return true;
    }
    return false;
  }
  function sendView() {
    if (feed.epoch === null) return;
    var key = shownIds.join(",");
    if (key === viewSent) return;
    if (send({ action: "view", ids: shownIds })) viewSent = key;
  }
  function askSnapshot() {
    var now = Date.now();
    if (now - feed.asked < 1500) return; // one question at a time (the server allows 1/s)
    feed.asked = now;
    send({ action: "snapshot" });
  }

  function stateBadges(states) {
    return Object.keys(states || {})
      .sort()
      .map(function (s) {
        return '<span class="badge state-' + T.esc(s) + '">' + states[s] + " " + T.esc(s) + "</span>";
      })
      .join("");
  }
  function setPipes(pipes) {
    if (!pipes) return;
    pipes.forEach(function (p) {
      pipelineNames[p[0]] = p[1];
    });
  }

  /* The headline KPIs: real nodes (simulated ones beside them, labelled), or one class
     when the Real/Simulated filter asks for it. An acceptance figure that has no traffic
     now shows the last one measured and its age. */
  var lastKpis = null;
  function ago(s) {
    s = Math.round(s || 0);
    return s < 120 ? s + " s ago" : s < 7200 ? Math.round(s / 60) + " min ago" : Math.round(s / 3600) + " h ago";
  }
  function kpis(msg) {
    if (!msg || !msg.kpis) return;
    var sim = filters().sim;
    var k = (sim === "sim" ? msg.kpis_simulated : msg.kpis) || {};
    var other = sim ? {} : msg.kpis_simulated || {};
    var last = k.acceptance_rate == null ? k.last_measured : null;
    var root = document.getElementById("totals");
    var simPill = '<span class="pill pill-simulated">simulated</span> ';
    T.setHTML(root, '[data-k="scope"]', sim === "sim" ? simPill + "nodes" : "real nodes");
    T.setText(root, '[data-k="power"]', T.watts(k.power_w));
    T.setHTML(root, '[data-k="power_src"]', T.sourcePill(k.power_source) + (other.nodes ? " " + simPill + T.watts(other.power_w) : ""));
    T.setHTML(root, '[data-k="tpj_src"]', T.sourcePill(k.power_source));
    T.setText(root, '[data-k="tps"]', T.fmt(k.tokens_per_s, 0));
    T.setHTML(root, '[data-k="tps_sim"]', other.nodes ? simPill + T.fmt(other.tokens_per_s, 0) + " tok/s not included" : "accepted + bonus tokens");
    T.setText(root, '[data-k="tpj"]', T.fmt(k.tokens_per_j, 3));
    T.setText(root, '[data-k="acc"]', T.pct(last ? last.acceptance_rate : k.acceptance_rate));
    T.setText(root, '[data-k="mal"]', T.fmt(last ? last.mean_acceptance_length : k.mean_acceptance_length, 2));
    T.setHTML(root, '[data-k="acc_last"]', last ? '<span class="dim small">last measured ' + ago(last.age_s) + "</span>" : "");
    T.windowLabel(root, last);
  }
  function headline(msg) {
    if (msg.ts) serverNow = msg.ts;
    var root = document.getElementById("totals");
    var totals = msg.totals;
    if (totals) {
      T.setText(root, '[data-k="sim"]', String(totals.simulated_nodes || 0));
    }
    if (msg.kpis) lastKpis = msg;
    nodeCount(msg);
    if (msg.kpis) kpis(msg);
  }
  /* The node count and states of the nodes the Real/Simulated filter asks for. */
  function nodeCount(msg) {
    if (!msg) return;
    var sim = filters().sim;
    var of = sim === "real" ? msg.kpis : sim === "sim" ? msg.kpis_simulated : null;
    var totals = of && of.states ? of : msg.totals;
    if (!totals) return;
    var root = document.getElementById("totals");
    T.setText(root, '[data-k="nodes"]', String(totals.nodes || 0));
    T.setHTML(root, '[data-k="states"]', stateBadges(totals.states));
  }

  function onSnapshot(m) {
    feed.epoch = m.epoch;
    feed.seq = m.seq;
    feed.asked = 0;
    rows = {};
    (m.rows || []).forEach(setRow);
    setPipes(m.pipes);
    headline(m);
    viewSent = ""; // the server starts this socket's figures over
    refilter();
    render();
  }
  function onDelta(m) {
    applyFigs(m.figs); // absolute values: true whatever the sequence
    headline(m);
    if (rows === null) return;
    if (m.epoch !== feed.epoch || m.seq !== feed.seq + 1) {
      if (m.epoch === feed.epoch && m.seq <= feed.seq) return; // already in the snapshot
      askSnapshot(); // a gap, or another publisher: start over
      render();
      return;
    }
    feed.seq = m.seq;
    setPipes(m.pipes);
    var changed = (m.rows && m.rows.length) || (m.gone && m.gone.length);
    (m.rows || []).forEach(setRow);
    (m.gone || []).forEach(function (id) {
      delete rows[id];
    });
    if (changed) refilter();
    render();
  }

  form.addEventListener("input", function () {
    refilter();
    wrap.scrollTop = 0; // other rows: from the top
    render();
    kpis(lastKpis);
    nodeCount(lastKpis);
    syncUrl();
  });

  socket = new T.LiveSocket("/ws/live/", { subscribe: [sorter.subscription], onMessage: function (m) {
    if (m.type === "fleet.snapshot") onSnapshot(m);
    else if (m.type === "fleet.sort") sorter.column(m);
    else if (m.type === "fleet.update") onDelta(m);
    else if (m.type === "fleet.figs") {
      applyFigs(m.figs);
      render();
    }
  } });
  window.TandemFleet = { // for the browser tests: what the page holds and shows
    rows: function () { return rows ? Object.keys(rows).length : 0; },
    shown: function () { return order.length; },
    seq: function () { return feed.seq; },
    epoch: function () { return feed.epoch; },
    ids: function (from, to) { return order.slice(from, to).map(function (r) { return r.id; }); },
  };
})();

/* Fleet page: totals and the node table, live. */
(function () {
  "use strict";
  var T = window.Tandem;
  var tbody = document.querySelector("#nodes tbody");
  var form = document.getElementById("filters");
  form.addEventListener("submit", function (e) { e.preventDefault(); }); // filters apply live
  // server-rendered utilization bars: widths from data attributes (no inline styles, CSP)
  document.querySelectorAll(".bar > span[data-width]").forEach(function (el) {
    el.style.width = el.dataset.width + "%";
  });
  var pipelineNames = {};
  document.querySelectorAll('#filters select[name="pipeline"] option').forEach(function (o) {
    if (o.value) pipelineNames[o.value] = o.textContent;
  });

  function stateBadges(states) {
    return Object.keys(states || {})
      .sort()
      .map(function (s) {
        return '<span class="badge state-' + T.esc(s) + '">' + states[s] + " " + T.esc(s) + "</span>";
      })
      .join("");
  }

  function newRow(r) {
    var tr = document.createElement("tr");
    tr.dataset.id = r.id;
    tr.innerHTML =
      '<td><a href="/nodes/' + r.id + '/">' + T.esc(r.name) + "</a>" +
      (r.sim ? ' <span class="pill pill-simulated">simulated</span>' : "") + "</td>" +
      '<td class="c-state"></td><td class="c-role"></td><td class="c-pipe"></td>' +
      '<td class="num c-power"></td><td class="c-util"><span class="bar"><span></span></span><span class="v"></span></td>' +
      '<td class="num c-batch"></td><td class="num c-tps"></td><td class="num c-acc"></td><td class="num c-seen dim"></td>';
    tbody.appendChild(tr);
    return tr;
  }

  function cell(tr, cls) {
    return tr.querySelector("." + cls);
  }
  function put(el, html) {
    if (el && el.innerHTML !== html) el.innerHTML = html;
  }

  function updateRow(tr, r) {
    tr.dataset.state = r.state;
    tr.dataset.role = r.role || "none";
    tr.dataset.pipeline = r.pipeline || "";
    tr.dataset.sim = r.sim ? "1" : "0";
    tr.dataset.name = r.name;
    put(cell(tr, "c-state"), '<span class="badge state-' + T.esc(r.state) + '">' + T.esc(r.state) + "</span>");
    put(cell(tr, "c-role"), r.role ? T.esc(r.role) : "—");
    var pipe = cell(tr, "c-pipe");
    if (pipe) {
      put(pipe, r.pipeline ? '<a href="/pipelines/' + r.pipeline + '/">' + T.esc(pipelineNames[r.pipeline] || "#" + r.pipeline) + "</a>" : '<span class="dim">—</span>');
    }
    put(cell(tr, "c-power"), T.watts(r.power_w) + " " + T.sourcePill(r.src));
    var util = cell(tr, "c-util");
    if (util) {
      util.querySelector(".bar > span").style.width = (r.util ? Math.round(r.util * 100) : 0) + "%";
      T.setText(util, ".v", T.pct(r.util, 0));
    }
    put(cell(tr, "c-batch"), T.fmt(r.batch, 1));
    put(cell(tr, "c-tps"), r.role === "draft" && !r.tps ? '<span class="dim" title="Drafters deliver no tokens themselves: their verifiers do">—</span>' : T.fmt(r.tps, 1));
    put(cell(tr, "c-acc"), T.pct(r.acc));
    put(cell(tr, "c-seen"), r.seen_s === null || r.seen_s === undefined ? "never" : Math.round(r.seen_s) + " s ago");
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
  function apply() {
    var f = filters();
    var shown = 0,
      total = 0;
    tbody.querySelectorAll("tr[data-id]").forEach(function (tr) {
      total += 1;
      var ok =
        (!f.q || tr.dataset.name.toLowerCase().indexOf(f.q) >= 0) &&
        (!f.state || tr.dataset.state === f.state) &&
        (!f.role || tr.dataset.role === f.role) &&
        (!f.pipeline || tr.dataset.pipeline === f.pipeline) &&
        (!f.sim || (f.sim === "sim") === (tr.dataset.sim === "1"));
      tr.hidden = !ok;
      if (ok) shown += 1;
    });
    T.setText(document, "#shown", String(shown));
    T.setText(document, "#total", String(total));
  }
  form.addEventListener("input", function () {
    apply();
    kpis(lastKpis);
    var params = new URLSearchParams();
    var f = new FormData(form);
    f.forEach(function (v, k) {
      if (v) params.set(k, v);
    });
    history.replaceState(null, "", location.pathname + (params.toString() ? "?" + params : ""));
  });

  /* The headline KPIs: real nodes (simulated ones beside them, labelled), or one class
     when the Real/Simulated filter asks for it. An acceptance figure that has no traffic
     now shows the last one measured and its age. */
  var lastKpis = null;
  function ago(s) {
    s = Math.round(s || 0);
    return s < 120 ? s + " s ago" : s < 7200 ? Math.round(s / 60) + " min ago" : Math.round(s / 3600) + " h ago";
  }
  function kpis(msg) {
    if (!msg) return;
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
  }

  function onFleet(msg) {
    var totals = msg.totals || {};
    var root = document.getElementById("totals");
    T.setText(root, '[data-k="nodes"]', String(totals.nodes || 0));
    T.setHTML(root, '[data-k="states"]', stateBadges(totals.states));
    lastKpis = msg;
    kpis(msg);
    T.setText(root, '[data-k="sim"]', String(totals.simulated_nodes || 0));
    (msg.pipelines || []).forEach(function (p) {
      pipelineNames[p.id] = p.name;
    });
    if (!msg.nodes) return;
    var seen = {};
    var existing = {};
    tbody.querySelectorAll("tr[data-id]").forEach(function (tr) {
      existing[tr.dataset.id] = tr;
    });
    var empty = tbody.querySelector(".empty-row");
    if (empty && msg.nodes.length) empty.remove();
    msg.nodes.forEach(function (r) {
      var tr = existing[r.id] || newRow(r);
      updateRow(tr, r);
      tr.dataset.live = "1";
      seen[r.id] = true;
    });
    Object.keys(existing).forEach(function (id) {
      // Drop only rows the aggregator reported before (a retired node): a node registered
      // since its last registry refresh keeps its server-rendered row until it appears.
      if (!seen[id] && existing[id].dataset.live === "1") existing[id].remove();
    });
    apply();
  }

  apply();
  new T.LiveSocket("/ws/live/", { subscribe: [{ topic: "fleet" }], onMessage: function (m) {
    if (m.type === "fleet.update") onFleet(m);
  } });
})();

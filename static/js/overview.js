/* Home page: the live fleet overview (totals and one row per pipeline), from the wall feed. */
(function () {
  "use strict";
  var T = window.Tandem;
  var root = document.getElementById("overview");
  if (!root) return;
  var tbody = root.querySelector("#overview-pipelines tbody");

  function row(p) {
    var tr = tbody.querySelector('tr[data-id="' + p.id + '"]');
    if (tr) return tr;
    var empty = tbody.querySelector(".empty-row");
    if (empty) empty.remove();
    tr = document.createElement("tr");
    tr.dataset.id = p.id;
    tr.innerHTML = '<td><a href="/pipelines/' + p.id + '/">' + T.esc(p.name) + "</a>" +
      (p.simulated ? ' <span class="pill pill-simulated">simulated</span>' : "") + "</td>" +
      '<td class="c-nodes"></td><td class="num c-tps"></td><td class="num c-acc"></td><td class="num opt c-mal"></td>' +
      '<td class="num opt c-batch"></td><td class="num opt c-itl"></td><td class="num opt c-power"></td><td class="num opt c-tpj"></td>';
    tbody.appendChild(tr);
    return tr;
  }

  /* An acceptance figure now, else the last one measured (traffic stopped) and its age. */
  function lastOr(k, name) {
    return k[name] != null ? k[name] : (k.last_measured || {})[name];
  }
  function lastNote(k) {
    var l = k.last_measured;
    return k.acceptance_rate == null && l ? '<span class="dim small">last measured ' + T.ago(l.age_s) + "</span>" : "";
  }

  function onFleet(m) {
    var t = m.totals || {};
    var k = m.kpis || {}; // the headline: real nodes only
    var ks = m.kpis_simulated || {};
    T.setText(root, '[data-o="tps"]', T.fmt(k.tokens_per_s, 0));
    T.setHTML(root, '[data-o="sim"]', ks.nodes ? '<span class="pill pill-simulated">simulated</span> ' + T.fmt(ks.tokens_per_s, 0) + " tok/s on " + T.plural(ks.nodes, "simulated node") + " (not included)" : "");
    T.setText(root, '[data-o="power"]', T.watts(k.power_w));
    T.setHTML(root, '[data-o="src"]', T.sourcePill(k.power_source) + (ks.nodes ? ' <span class="pill pill-simulated">simulated</span> ' + T.watts(ks.power_w) : ""));
    T.setText(root, '[data-o="tpj"]', T.fmt(k.tokens_per_j, 3));
    T.setHTML(root, '[data-o="tpj_src"]', T.sourcePill(k.power_source)); // modeled power: modeled tokens/J
    T.setText(root, '[data-o="acc"]', T.pct(lastOr(k, "acceptance_rate")));
    T.setText(root, '[data-o="mal"]', T.fmt(lastOr(k, "mean_acceptance_length"), 2));
    T.setHTML(root, '[data-o="acc_last"]', lastNote(k));
    T.windowLabel(root.querySelector(".kpis"), k.acceptance_rate == null && k.last_measured);
    // the real nodes, as every headline figure; the simulated ones said apart
    var states = k.states || t.states || {};
    T.setText(root, '[data-o="online"]', String(states.online || 0));
    T.setText(root, '[data-o="nodes"]', String(k.nodes != null ? k.nodes : t.nodes || 0));
    T.setHTML(root, '[data-o="states"]', Object.keys(states).sort().map(function (s) {
      return '<span class="badge state-' + T.esc(s) + '">' + states[s] + " " + T.esc(s) + "</span>";
    }).join(""));
    T.setHTML(root, '[data-o="nodes_sim"]', ks.nodes ? '<span class="pill pill-simulated">simulated</span> ' +
      ((ks.states || {}).online || 0) + " of " + T.plural(ks.nodes, "simulated node") + " online (not included)" : "");
    var seen = {};
    (m.pipelines || []).forEach(function (p) {
      var tr = row(p);
      var ps = p.stats || {};
      seen[p.id] = true;
      T.setText(tr, ".c-nodes", T.plural(p.drafters, "drafter") + " · " + T.plural(p.verifiers, "verifier"));
      T.setText(tr, ".c-tps", T.fmt(ps.tokens_per_s, 0));
      var last = Object.assign({ last_measured: p.last_measured }, ps);
      T.setHTML(tr, ".c-acc", T.esc(T.pct(lastOr(last, "acceptance_rate"))) + (lastNote(last) ? "<br>" + lastNote(last) : ""));
      T.setText(tr, ".c-mal", T.fmt(lastOr(last, "mean_acceptance_length"), 2));
      T.setText(tr, ".c-batch", T.fmt(ps.batch_mean, 1));
      T.setText(tr, ".c-itl", ps.itl_p99_ms == null ? "—" : T.fmt(ps.itl_p99_ms, 0) + " ms");
      T.setHTML(tr, ".c-power", T.watts(ps.power_w) + " " + T.sourcePill(ps.power_source));
      T.setText(tr, ".c-tpj", T.fmt(ps.tokens_per_j, 3));
    });
    tbody.querySelectorAll("tr[data-id]").forEach(function (tr) {
      if (!seen[tr.dataset.id]) tr.remove();
    });
  }

  new T.LiveSocket("/ws/wall/", { onMessage: function (m) { if (m.type === "fleet.update") onFleet(m); } });
})();

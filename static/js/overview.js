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
      '<td class="c-nodes"></td><td class="num c-tps"></td><td class="num c-acc"></td><td class="num c-mal"></td>' +
      '<td class="num c-batch"></td><td class="num c-itl"></td><td class="num c-power"></td><td class="num c-tpj"></td>';
    tbody.appendChild(tr);
    return tr;
  }

  function onFleet(m) {
    var t = m.totals || {};
    var s = m.stats || {};
    T.setText(root, '[data-o="tps"]', T.fmt(t.tokens_per_s, 0));
    T.setHTML(root, '[data-o="sim"]', t.simulated_nodes ? '<span class="pill pill-simulated">includes ' + t.simulated_nodes + " simulated</span>" : "");
    T.setText(root, '[data-o="power"]', T.watts(t.power_w));
    T.setHTML(root, '[data-o="src"]', T.sourcePill(t.power_source));
    T.setText(root, '[data-o="tpj"]', T.fmt(t.tokens_per_j, 3));
    T.setText(root, '[data-o="acc"]', T.pct(s.acceptance_rate));
    T.setText(root, '[data-o="mal"]', T.fmt(s.mean_acceptance_length, 2));
    T.setText(root, '[data-o="online"]', String((t.states || {}).online || 0));
    T.setText(root, '[data-o="nodes"]', String(t.nodes || 0));
    T.setHTML(root, '[data-o="states"]', Object.keys(t.states || {}).sort().map(function (k) {
      return '<span class="badge state-' + T.esc(k) + '">' + t.states[k] + " " + T.esc(k) + "</span>";
    }).join(""));
    var seen = {};
    (m.pipelines || []).forEach(function (p) {
      var tr = row(p);
      var ps = p.stats || {};
      seen[p.id] = true;
      T.setText(tr, ".c-nodes", p.drafters + " drafters · " + p.verifiers + " verifiers");
      T.setText(tr, ".c-tps", T.fmt(ps.tokens_per_s, 0));
      T.setText(tr, ".c-acc", T.pct(ps.acceptance_rate));
      T.setText(tr, ".c-mal", T.fmt(ps.mean_acceptance_length, 2));
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

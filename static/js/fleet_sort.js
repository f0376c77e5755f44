/* The fleet table's order (static/js/fleet.js's rows), chosen on its headers and kept in the URL
   (?sort=tps&dir=desc).

   By a row's own field (name, state, role, pipeline), or by a live figure (power, util, batch,
   tps, acc, seen). The socket sends a row's figures only while the row is in view, so a live
   order comes from the server: the page says what it sorts by ({"action": "sort"}, and in its
   fleet subscription, so a reconnected socket knows it again) and gets that figure of every
   node ("fleet.sort"): at once, then every 5 s. The rule is fleet/telemetry/fig_order.py's, the
   one the page's first rows were ordered by: a node without the figure (a drafter's tokens/s
   included, shown as "—") comes last in both directions; ties go by name.

   The rows are re-ordered only when a new column arrives, every 5 s, never as each figure
   moves: a console where rows trade places every second cannot be read or clicked. And not
   while the pointer or the keyboard's focus is on the rows: an operator about to click a row
   must not get its neighbour. The new order waits (the bar says so) until the pointer leaves.
   The figures in view keep moving meanwhile, so for a few seconds they may be slightly out
   of order. */
(function () {
  "use strict";
  var FIELDS = ["name", "state", "role", "pipeline"];
  var FIGS = ["power", "util", "batch", "tps", "acc", "seen"];
  var WAIT_MS = 2500; // a new live sort waits this long for its column, then sorts without

  /* table: the <table>; opts: pipelineName(id), send(message) -> sent?, syncUrl() (the order
     was chosen), onChange() (another order: from the top), onReorder() (the same order, new
     figures: stay where you are). */
  window.TandemFleetSort = function (table, opts) {
    var tbody = table.querySelector("tbody");
    var asked = new URLSearchParams(location.search);
    var key = asked.get("sort");
    var sort = { key: FIELDS.indexOf(key) >= 0 || FIGS.indexOf(key) >= 0 ? key : "name", dir: asked.get("dir") === "desc" ? -1 : 1 };
    var vals = {}; // node id -> the figure sorted by, as last applied
    var valsKey = null; // the figure `vals` holds
    var pending = null; // a newer column, held while the operator is on the rows
    var waiting = null; // the timer of a new live sort waiting for its column
    var subscription = { topic: "fleet" };
    var note = document.createElement("span");
    note.className = "dim small sort-note";
    var count = document.querySelector("#filters .count");
    if (count) count.after(note);

    function live() {
      return FIGS.indexOf(sort.key) >= 0;
    }
    function setSubscription() {
      if (live()) subscription.sort = sort.key;
      else delete subscription.sort;
    }
    function figure(r) {
      var v = valsKey === sort.key ? vals[r.id] : undefined;
      if (v === undefined || v === null) return null;
      if (sort.key === "tps" && r.role === "draft" && !v) return null;
      return v;
    }
    function fieldValue(r) {
      if (sort.key === "pipeline") return r.pipeline ? opts.pipelineName(r.pipeline) : "\uffff";
      if (sort.key === "role") return r.role || "\uffff";
      return r[sort.key] || "";
    }
    function compare(a, b) {
      if (live()) {
        var x = figure(a), y = figure(b);
        if (x === null || y === null) {
          if (x !== y) return x === null ? 1 : -1; // no figure: last, both ways
        } else if (x !== y) {
          return (x < y ? -1 : 1) * sort.dir;
        }
      } else if (sort.key !== "name") {
        var p = fieldValue(a), q = fieldValue(b);
        if (p !== q) return (p < q ? -1 : 1) * sort.dir;
      }
      var byName = a.name < b.name ? -1 : a.name > b.name ? 1 : a.id - b.id;
      return sort.key === "name" ? byName * sort.dir : byName;
    }

    /* The operator is on the rows: the pointer over them, or the focus in them. */
    function held() {
      return tbody.matches(":hover") || tbody.contains(document.activeElement);
    }
    function apply(column, fresh) {
      vals = column.vals;
      valsKey = column.key;
      pending = null;
      note.textContent = "";
      if (fresh) opts.onChange();
      else opts.onReorder();
    }
    function release() {
      if (pending && !held()) apply(pending, false);
    }
    tbody.addEventListener("pointerleave", release);
    tbody.addEventListener("focusout", function () {
      setTimeout(release, 0); // the focus has moved by then
    });
    /* A "fleet.sort" message: the column of one figure. */
    function column(m) {
      if (m.key !== sort.key || !m.ids || !m.vals) return; // an answer to an older choice
      var map = {};
      for (var i = 0; i < m.ids.length; i++) map[m.ids[i]] = m.vals[i];
      var fresh = waiting !== null;
      clearTimeout(waiting);
      waiting = null;
      var next = { key: m.key, vals: map };
      if (fresh || valsKey !== m.key || !held()) {
        apply(next, fresh);
      } else {
        pending = next;
        note.textContent = "new order held while the pointer or focus is on the rows";
      }
    }

    function marks() {
      table.querySelectorAll("th[data-sort]").forEach(function (th) {
        var mine = th.dataset.sort === sort.key;
        if (mine) th.setAttribute("aria-sort", sort.dir > 0 ? "ascending" : "descending");
        else th.removeAttribute("aria-sort");
        var mark = th.querySelector(".sort-mark");
        if (mark) mark.textContent = mine ? (sort.dir > 0 ? " ▲" : " ▼") : "";
      });
    }
    /* Another order, chosen on a header. A figure's first click shows the largest first. */
    function sortBy(next) {
      var byFigure = FIGS.indexOf(next) >= 0;
      sort = { key: next, dir: sort.key === next ? -sort.dir : byFigure ? -1 : 1 };
      marks();
      setSubscription();
      opts.syncUrl();
      if (pending && pending.key === next) {
        vals = pending.vals; // the other direction: with the newest figures
        valsKey = pending.key;
      }
      pending = null;
      note.textContent = "";
      clearTimeout(waiting);
      waiting = null;
      var sent = opts.send({ action: "sort", key: byFigure ? next : null });
      if (byFigure && sent && valsKey !== next) {
        // its column is on its way: the rows keep their order until it comes
        waiting = setTimeout(function () {
          waiting = null;
          opts.onChange();
        }, WAIT_MS);
      } else {
        opts.onChange();
      }
    }
    table.querySelectorAll("th[data-sort]").forEach(function (th) {
      th.style.cursor = "pointer";
      th.title = "Sort by " + th.textContent.toLowerCase();
      var mark = document.createElement("span");
      mark.className = "sort-mark";
      th.appendChild(mark);
      th.addEventListener("click", function () {
        sortBy(th.dataset.sort);
      });
      // and from the keyboard: the header is focusable (tabindex), Enter or Space sorts
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") {
          e.preventDefault();
          sortBy(th.dataset.sort);
        }
      });
    });
    marks();
    setSubscription();

    return {
      compare: compare,
      column: column,
      subscription: subscription,
      /* the order in URL parameters (none for the default, by name) */
      toParams: function (params) {
        if (sort.key !== "name" || sort.dir < 0) {
          params.set("sort", sort.key);
          params.set("dir", sort.dir > 0 ? "asc" : "desc");
        }
      },
      key: function () { return sort.key; },
    };
  };
})();

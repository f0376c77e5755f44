"""The fleet page at 10,000 nodes in a real Chromium (issue 15): the page loads and stays
responsive (a filter applies within 1 s), shows a node's state change within 2 s of the
message, and receives <= 100 KB/s and <= 4 messages/s with every node's figures moving.

Figures are printed (run with -s) and written to artifacts/fleet10k.json."""

from __future__ import annotations

import json
import time

import pytest

from tests.browser import fleet10k
from tests.browser.conftest import ROOT, Stack
from tests.browser.pages import login, wait_live

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

N = 10_000
WINDOW_S = 10.0
ROWS = "#nodes tbody tr[data-id]"
SHOWN = "n => document.querySelector('#shown').textContent === n"

# Type a filter, wait for the table to show it: ms from the input event to the next frame.
FILTER = """async ([selector, value, expect]) => {
  const el = document.querySelector(selector);
  const t0 = performance.now();
  el.value = value;
  el.dispatchEvent(new Event("input", { bubbles: true }));
  await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
  const shown = document.querySelector("#shown").textContent;
  return { ms: performance.now() - t0, shown: shown, rows: window.TandemFleet.shown() };
}"""

# Set window.__shownAt (Date.now(), the machine's clock) when node `id`'s row shows `state`.
WATCH = """([id, state]) => {
  window.__shownAt = null;
  const seen = () => {
    const el = document.querySelector(`tr[data-id="${id}"] .c-state`);
    return el && el.textContent.includes(state);
  };
  const obs = new MutationObserver(() => {
    if (seen()) { window.__shownAt = Date.now(); obs.disconnect(); }
  });
  const all = { subtree: true, childList: true, characterData: true };
  obs.observe(document.querySelector("#nodes tbody"), all);
}"""

# Before any page script: record every websocket message (the browser's clock and size), and
# long tasks.
# (Playwright's own frame events reach a sync test only when it next calls Playwright.)
COUNT_FRAMES = """(() => {
  window.__longtasks = []; // tasks over 50 ms: the page frozen for that long
  window.__longtaskObserver = new PerformanceObserver(l =>
    l.getEntries().forEach(e => window.__longtasks.push(e.duration)));
  window.__longtaskObserver.observe({ type: "longtask" });
  window.__frames = [];
  const Native = window.WebSocket;
  window.WebSocket = function (url, protocols) {
    const ws = protocols === undefined ? new Native(url) : new Native(url, protocols);
    ws.addEventListener("message", e => {
      const text = typeof e.data === "string" ? e.data : "";
      window.__frames.push([Date.now(), new TextEncoder().encode(text).length, text.slice(0, 40)]);
    });
    return ws;
  };
  window.WebSocket.prototype = Native.prototype;
  window.WebSocket.OPEN = Native.OPEN;
})();"""


@pytest.fixture
def web_only(transactional_db, collected_static):
    """daphne without an aggregator: the synthetic publisher is the fleet feed's only one."""
    s = Stack()
    s.start_web()
    yield s
    s.stop()


@pytest.mark.timeout(300)  # 10,000 nodes written, then pages and screenshots
def test_fleet_page_at_10k_nodes(web_only, chromium, screenshots, viewer):
    rows = fleet10k.create(N)
    publisher = fleet10k.Publisher(rows)
    publisher.start()
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.add_init_script(COUNT_FRAMES)
    figures: dict = {"nodes": N}
    try:
        login(page, web_only.url, viewer.username)
        t0 = time.monotonic()
        response = page.goto(f"{web_only.url}/fleet/")
        figures["first_render_s"] = round(time.monotonic() - t0, 3)
        assert response.status and response.status == 200
        html = response.text()
        assert html.count("<tr data-id=") <= 50  # the first screenful, not 10,000 rows
        wait_live(page)
        page.wait_for_function(f"() => window.TandemFleet?.rows() === {N}", timeout=20000)
        figures["all_rows_loaded_s"] = round(time.monotonic() - t0, 3)
        assert page.text_content("#shown") == str(N) and page.text_content("#total") == str(N)
        rendered = page.evaluate(f"() => document.querySelectorAll('{ROWS}').length")
        assert rendered < 200, rendered  # virtual: a screenful and a margin
        figures["rows_in_dom"] = rendered
        # the rows in view get their figures
        first_id = rows[0]["id"]
        page.wait_for_function(
            "id => document.querySelector(`tr[data-id='${id}'] .c-power`)"
            ".textContent.includes('W')",
            arg=first_id,
            timeout=5000,
        )

        # bytes and messages a browser receives, steady state
        page.wait_for_timeout(2000)
        start = page.evaluate("() => Date.now()")
        page.wait_for_timeout(WINDOW_S * 1000)
        frames = page.evaluate("() => window.__frames")
        window = [fr for fr in frames if start <= fr[0] < start + WINDOW_S * 1000]
        figures["bytes_per_s_to_browser"] = round(sum(fr[1] for fr in window) / WINDOW_S)
        figures["messages_per_s_to_browser"] = round(len(window) / WINDOW_S, 2)
        figures["snapshot_bytes"] = max(
            (fr[1] for fr in frames if '"fleet.snapshot"' in fr[2]), default=None
        )
        figures["snapshots_in_window"] = sum('"fleet.snapshot"' in fr[2] for fr in window)

        # a filter applies within 1 s: by name, then by state
        figures.update(filters_apply_within_1_s(page, N))

        # scrolled far down, the rows there get their figures at once
        page.evaluate(
            "() => { const w = document.querySelector('.table-wrap');"
            " w.scrollTop = w.scrollHeight / 2; }"
        )
        t_scroll = time.monotonic()
        page.wait_for_function(
            f"() => {{ const rows = document.querySelectorAll('{ROWS}');"
            " return rows.length > 20 && rows[0].dataset.name > 'node-04000' && [...rows]"
            ".slice(10, 20).every(r => r.querySelector('.c-power').textContent.includes('W')); }",
            timeout=3000,
        )
        figures["scrolled_rows_figures_s"] = round(time.monotonic() - t_scroll, 3)

        # a node's state change is visible within 2 s of the message
        target = page.evaluate(f"() => Number(document.querySelectorAll('{ROWS}')[15].dataset.id)")
        page.evaluate(WATCH, [target, "draining"])
        publisher.change_state(target, "draining")
        page.wait_for_function("() => window.__shownAt !== null", timeout=10000)
        shown_at_ms = page.evaluate("() => window.__shownAt")
        deadline = time.monotonic() + 5
        while (target, "draining") not in publisher.sent_at and time.monotonic() < deadline:
            time.sleep(0.05)
        sent_at = publisher.sent_at[(target, "draining")]
        figures["state_change_visible_s"] = round(shown_at_ms / 1000.0 - sent_at, 3)
        page.screenshot(path=str(screenshots / "fleet-10k.png"))
        # filtered while scrolled far down: the one matching row is on screen
        page.select_option('select[name="state"]', "draining")
        page.wait_for_function(SHOWN, arg="1", timeout=1000)
        page.wait_for_selector(f'tr[data-id="{target}"]', state="visible", timeout=1000)
        page.screenshot(path=str(screenshots / "fleet-10k-draining.png"))
        page.select_option('select[name="state"]', "")
        page.wait_for_function(SHOWN, arg=str(N), timeout=1000)
        # sorted by state: "draining" comes before "online"
        t_sort = time.monotonic()
        page.click('th[data-sort="state"]')
        page.wait_for_function(
            f"id => document.querySelector('{ROWS}').dataset.id === String(id)",
            arg=target,
            timeout=1000,
        )
        figures["sort_by_state_s"] = round(time.monotonic() - t_sort, 3)

        longtasks = page.evaluate("() => window.__longtasks.slice()")
        figures["longest_task_ms"] = round(max(longtasks), 1) if longtasks else 0.0
        # (the observer works: a 150 ms busy loop is seen as a long task)
        page.evaluate(
            "() => setTimeout(() => { const t = performance.now();"
            " while (performance.now() - t < 150); }, 0)"
        )
        page.wait_for_function("() => window.__longtasks.some(d => d >= 150)", timeout=2000)
        assert figures["longest_task_ms"] < 500, figures  # never frozen half a second
        ticks = sorted(publisher.tick_s)
        figures["publisher_tick_s_p50"] = round(ticks[len(ticks) // 2], 4)
        assert publisher.error is None, publisher.error
    finally:
        context.close()
        publisher.stop()
        figures["publisher_ticks"] = publisher.ticks
        print("\nfleet10k:", json.dumps(figures), "publisher error:", repr(publisher.error))
        out = ROOT / "artifacts" / "fleet10k.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(figures, indent=2))

    assert figures["filter_by_name_ms"] <= 1000 and figures["filter_clear_ms"] <= 1000
    assert figures["filter_by_role_s"] <= 1.0 and figures["sort_by_state_s"] <= 1.0
    assert 0 <= figures["state_change_visible_s"] <= 2.0, figures
    assert figures["bytes_per_s_to_browser"] <= 100_000, figures
    assert figures["messages_per_s_to_browser"] <= 4.0, figures


def test_a_new_publisher_and_a_resync_keep_the_page_right(web_only, chromium, viewer):
    """A new publisher (an aggregator restarted, another leader) starts another epoch: the
    page gets a new snapshot, without a reload, and follows the new publisher's deltas."""
    rows = fleet10k.create(300)
    first = fleet10k.Publisher(rows[:-1])  # the last node joins under the next publisher
    first.start()
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    second = None
    try:
        login(page, web_only.url, viewer.username)
        page.goto(f"{web_only.url}/fleet/")
        wait_live(page)
        page.wait_for_function("() => window.TandemFleet?.rows() === 299", timeout=10000)
        epoch = page.evaluate("() => window.TandemFleet.epoch()")
        assert page.query_selector(f'tr[data-id="{rows[0]["id"]}"]') is not None
        first.stop()
        second = fleet10k.Publisher(rows[1:])  # node 0 left, the last node joined
        second.start()
        page.wait_for_function("e => window.TandemFleet.epoch() !== e", arg=epoch, timeout=5000)
        assert page.query_selector(f'tr[data-id="{rows[0]["id"]}"]') is None
        page.wait_for_selector(f'tr[data-name="{rows[1]["name"]}"]', timeout=1000)
        assert page.text_content("#total") == "299"
        page.fill("#filters input[name=q]", rows[-1]["name"])
        page.wait_for_function(SHOWN, arg="1", timeout=1000)
        # and its deltas apply: a state change shows
        second.change_state(rows[-1]["id"], "draining")
        page.wait_for_function(
            "id => document.querySelector(`tr[data-id='${id}'] .c-state`)"
            ".textContent.includes('draining')",
            arg=rows[-1]["id"],
            timeout=2000,
        )
        assert first.error is None and second.error is None
    finally:
        context.close()
        first.stop()
        if second is not None:
            second.stop()


def filters_apply_within_1_s(page, n: int) -> dict:
    """Filters the fleet table by name (10 rows), clears it, then by role (a quarter of `n`
    rows) and back, each within 1 s; returns the times."""
    by_name = page.evaluate(FILTER, ['#filters input[name="q"]', "node-0424", None])
    assert by_name["rows"] == 10 and by_name["shown"] == "10", by_name
    page.wait_for_selector('tr[data-name="node-04242"]', timeout=1000)
    cleared = page.evaluate(FILTER, ['#filters input[name="q"]', "", None])
    assert cleared["rows"] == n
    t_sel = time.monotonic()
    page.select_option('select[name="role"]', "verify")
    page.wait_for_function(SHOWN, arg=str(n // 4), timeout=1000)
    by_role_s = time.monotonic() - t_sel
    page.select_option('select[name="role"]', "")
    page.wait_for_function(SHOWN, arg=str(n), timeout=1000)
    return {
        "filter_by_name_ms": round(by_name["ms"], 1),
        "filter_clear_ms": round(cleared["ms"], 1),
        "filter_by_role_s": round(by_role_s, 3),
    }

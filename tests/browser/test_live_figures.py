"""Live figures in a real Chromium (issue 14), read from the page and from Plotly's drawn data:

- a pipeline's and a node's page keep the last measured acceptance when traffic stops, said
  so with its age, from the first paint on;
- the wall's fleet charts draw the real nodes, the simulated ones on their own labelled line;
- α (est.) does not fall when k is lowered, on the drawn chart;
- node counts in English ("1 drafter");
- the wall-links and planner pages fit a 390 px phone.
"""

from __future__ import annotations

import json
import time

import pytest

from fleet.pipelines.services import pipeline_set_k_policy
from fleet.telemetry.aggregation import SNAPSHOT_FULL_S
from fleet.telemetry.merge import FLEET_REAL
from fleet.telemetry.models import Rollup
from tests.browser.fleetdata import Feeder, build
from tests.browser.pages import login, wait_live
from tests.telemetry import factories as f

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TEXT = "sel => (document.querySelector(sel) || {}).textContent || ''"
# Each trace of a chart as drawn: its name, axis and the y values Plotly holds.
TRACES = """id => {
  const el = document.getElementById(id);
  return el.data.map(t => ({ name: t.name, yaxis: t.yaxis || "y", y: Array.from(t.y) }));
}"""


def test_pipeline_and_node_pages_keep_the_last_measured_acceptance(stack, chromium, viewer):
    world = build()
    feeder = Feeder(world["nodes"])
    feeder.start()
    verifier = world["nodes"][0][0]
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        login(page, stack.url, viewer.username)
        page.goto(f"{stack.url}/pipelines/{world['pipeline'].pk}/")
        wait_live(page)
        acc = '#kpis [data-k="acceptance_rate"]'
        page.wait_for_function(f"sel => ({TEXT})(sel).endsWith('%')", arg=acc, timeout=8000)
        assert page.text_content('#kpis [data-k="acc_last"]') == ""  # live: no label

        feeder.stop()  # traffic stops: the live window empties within seconds
        page.wait_for_function(
            f"() => ({TEXT})('#kpis [data-k=\"acc_last\"]').includes('last measured')",
            timeout=20000,
        )
        label = page.text_content('#kpis [data-k="acc_last"]')
        assert label.startswith("last measured ") and label.endswith(" ago"), label
        assert page.text_content(acc).endswith("%")  # the figure, not a dash
        assert page.text_content('#kpis [data-k="mean_acceptance_length"]') != "—"
        assert page.text_content('#kpis [data-k="alpha"]') != "—"
        assert page.get_attribute("#kpis .kpi:has([data-k=acc_last])", "data-last") == "1"

        # the first paint says it too (server-rendered), on the pipeline's and a node's page
        # (a node's snapshot is rewritten at least every SNAPSHOT_FULL_S: its socket is live)
        for path in (f"/pipelines/{world['pipeline'].pk}/", f"/nodes/{verifier.pk}/"):
            deadline = time.monotonic() + SNAPSHOT_FULL_S + 5
            while True:
                html = page.request.get(stack.url + path).text()
                kpis = html.split('id="kpis"')[1].split("</section>")[0]
                if "last measured" in kpis or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert "last measured" in kpis, path
            shown = kpis.split('data-k="acceptance_rate">')[1].split("<")[0]
            assert shown.endswith("%"), (path, shown)
        page.goto(f"{stack.url}/nodes/{verifier.pk}/")
        wait_live(page)
        page.wait_for_function(
            f"() => ({TEXT})('#kpis [data-k=\"acc_last\"]').includes('last measured')",
            timeout=10000,
        )
        assert page.text_content('#kpis [data-k="acceptance_rate"]').endswith("%")
        assert errors == []
    finally:
        context.close()
        feeder.stop()


def test_wall_charts_draw_real_nodes_and_the_simulated_apart(stack, chromium, viewer):
    world = build()  # sram-draft-4 is simulated: a drafter drawing ~55 W
    solo = f.pipeline(name="solo")
    for name, role in (("solo-v", "verify"), ("solo-d", "draft")):
        node, _ = f.node(name=name)
        f.place(node, solo, role)
    feeder = Feeder(world["nodes"])
    feeder.start()
    context = chromium.new_context(viewport={"width": 1920, "height": 1080})
    page = context.new_page()
    frames: list[str] = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda data: frames.append(data)))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        login(page, stack.url, viewer.username)
        page.goto(f"{stack.url}/wall/")
        wait_live(page)
        page.wait_for_function(
            "() => { const el = document.getElementById('w-power'); "
            "return el && el.data && el.data[0].y.length > 183; }",
            timeout=15000,
        )
        power = page.evaluate(TRACES, "w-power")
        tokens = page.evaluate(TRACES, "w-tokens")
        assert [t["name"] for t in power] == ["drafting", "verification", "simulated nodes"]
        # the simulated node is a drafter: it draws power, it delivers no tokens itself
        assert [t["name"] for t in tokens] == ["tokens/s · real nodes"]
        assert power[2]["yaxis"] == "y2"  # its own axis
        axis = page.evaluate("() => document.getElementById('w-power').layout.yaxis2.title.text")
        assert axis == "simulated"

        # the history drawn is the real nodes' rollups, not all nodes'
        sent = page.evaluate(
            "() => JSON.parse(document.getElementById('wall-data').textContent).fleet_series"
        )
        n = len(sent["t"])
        assert n > 170
        assert power[0]["y"][:n] == pytest.approx(sent["power_draft_w"], abs=0.05)
        assert power[2]["y"][:n] == pytest.approx(sent["simulated_power_w"], abs=0.05)
        real = {
            (r.start.timestamp() + 10): r.data["power_draft_w"]
            for r in Rollup.objects.filter(scope="fleet", scope_id=FLEET_REAL, resolution_s=10)
        }
        everything = {
            (r.start.timestamp() + 10): r.data["power_draft_w"]
            for r in Rollup.objects.filter(scope="fleet", scope_id=0, resolution_s=10)
        }
        for t, drawn in zip(sent["t"], power[0]["y"][:n], strict=True):
            assert drawn == pytest.approx(real[t], abs=0.05)
            assert drawn < everything[t] - 20  # the simulated drafter (~55 W) is not in it
        assert all(v and v > 20 for v in power[2]["y"][:n])  # it is drawn apart instead

        # the live points: the real nodes' headline figures, the simulated ones apart
        real_draft, all_draft, sim_power = set(), set(), set()
        for text in frames:
            message = json.loads(text)
            if message.get("type") == "fleet.update":
                real_draft.add(round(message["kpis"]["power_draft_w"] or 0, 1))
                all_draft.add(round(message["stats"]["power_draft_w"] or 0, 1))
                sim_power.add(round(message["kpis_simulated"]["power_w"] or 0, 1))
        power = page.evaluate(TRACES, "w-power")
        assert round(power[0]["y"][-1], 1) in real_draft
        assert round(power[0]["y"][-1], 1) not in all_draft
        assert round(power[2]["y"][-1], 1) in sim_power

        # node counts in English, on the wall and on the home page
        card = f'.pipe-card[data-id="{solo.pk}"] .nodes'
        page.wait_for_selector(card)
        assert page.text_content(card) == "1 drafter · 1 verifier"
        assert page.text_content(f'.pipe-card[data-id="{world["pipeline"].pk}"] .nodes') == (
            "4 drafters · 2 verifiers"
        )
        page.goto(f"{stack.url}/")
        wait_live(page)
        row = f'#overview-pipelines tr[data-id="{solo.pk}"] .c-nodes'
        page.wait_for_function(f"sel => ({TEXT})(sel).includes('1 drafter ')", arg=row)
        assert page.text_content(row) == "1 drafter · 1 verifier"
        assert errors == []
    finally:
        context.close()
        feeder.stop()


def test_alpha_does_not_fall_on_the_drawn_chart_when_k_is_lowered(stack, chromium, operator):
    world = build()
    pipeline = world["pipeline"]
    feeder = Feeder(world["nodes"], k=4)
    feeder.start()
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    alpha = (
        "() => { const el = document.getElementById('ch-accept'); "
        "const t = el.data.find(d => d.name === 'α (est.)'); "
        "return { n: t.y.length, y: Array.from(t.y) }; }"
    )
    try:
        login(page, stack.url, operator.username)
        page.goto(f"{stack.url}/pipelines/{pipeline.pk}/")
        wait_live(page)
        start = page.evaluate(alpha)["n"]
        page.wait_for_function(
            "n => document.getElementById('ch-accept').data[1].y.length >= n + 3",
            arg=start,
            timeout=15000,
        )
        before = [v for v in page.evaluate(alpha)["y"][start:] if v is not None]
        assert before and min(before) > 70  # α ≈ 0.74..0.80, drawn in %

        pipeline_set_k_policy(
            pipeline_id=pipeline.pk, actor=operator, k_policy={"mode": "fixed", "k": 2}
        )
        feeder.k = 2  # the verifiers draft 2 tokens per round from now on
        changed = page.evaluate(alpha)["n"]
        # 10 s of live points: the window mixes k=4 and k=2, then holds k=2 only
        page.wait_for_function(
            "n => document.getElementById('ch-accept').data[1].y.length >= n + 5",
            arg=changed,
            timeout=20000,
        )
        after = [v for v in page.evaluate(alpha)["y"][changed:] if v is not None]
        assert len(after) >= 5
        # the feeder's α moves slowly (0.74..0.80 over minutes): a lowered k must not pull it
        assert min(after) >= min(before) - 3.0, (before, after)
        assert page.text_content('[data-c="k"]') == "2"
        # the k chart: k by batch size over time, the drafters' own k_hist (batches 5-16)
        band = (
            "() => { const t = document.getElementById('ch-k').data"
            ".find(d => d.name === 'batch 5–16'); return t ? Array.from(t.y) : []; }"
        )
        page.wait_for_function(f"() => ({band})().slice(-1)[0] === 2", timeout=20000)
        assert 4 in page.evaluate(band)  # the points before the change: k = 4
    finally:
        context.close()
        feeder.stop()


def test_wall_links_and_planner_pages_fit_a_phone(stack, chromium, admin):
    world = build()
    context = chromium.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    page = context.new_page()
    try:
        login(page, stack.url, admin.username)
        page.goto(f"{stack.url}/wall/links/")
        page.fill("#wall-name", "NOC left screen")
        page.click("form.toolbar button[type=submit]")
        page.wait_for_selector("#wall-url")
        for path in (
            "/wall/links/",
            "/planner/",
            "/planner/what-if",
            f"/planner/pipelines/{world['pipeline'].pk}/",
        ):
            page.goto(stack.url + path)
            page.wait_for_load_state("load")
            width = page.evaluate("() => document.documentElement.scrollWidth")
            assert width <= 390, f"{path}: {width} px wide on a 390 px phone"
        # the wall links keep their key columns: the screen's name, its status, Revoke
        row = "#wall-links tbody tr:first-child"
        page.goto(stack.url + "/wall/links/")
        for cell in ("td:first-child", "td:nth-child(6)", "button"):
            box = page.locator(f"{row} {cell}").bounding_box()
            assert box is not None and box["x"] + box["width"] <= 390 + 1, (cell, box)
    finally:
        context.close()


def test_serving_signals_are_drawn_and_a_zoom_holds_against_live_points(stack, chromium, viewer):
    """Queue, running, KV use and TTFT p99 drawn from the history and the live points; an
    operator's zoom (a dragged box) is not moved by the live points; a double-click resets."""
    world = build()
    feeder = Feeder(world["nodes"])
    feeder.start()
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    drawn = """([id, name]) => {
      const t = document.getElementById(id).data.find(d => d.name === name);
      return Array.from(t.y).filter(v => v !== null);
    }"""
    rng = "id => document.getElementById(id).layout.xaxis.range.map(v => new Date(v).getTime())"
    try:
        login(page, stack.url, viewer.username)
        page.goto(f"{stack.url}/pipelines/{world['pipeline'].pk}/")
        wait_live(page)
        page.wait_for_function("() => !!document.getElementById('ch-kv').calcdata")
        running = page.evaluate(drawn, ["ch-queue", "running"])
        waiting = page.evaluate(drawn, ["ch-queue", "waiting (queue)"])
        kv = page.evaluate(drawn, ["ch-kv", "KV slots in use"])
        ttft = page.evaluate(drawn, ["ch-ttft", "p99"])
        assert len(running) > 170 and min(running) >= 12  # the verifiers' batches: 12..24
        assert len(waiting) > 170 and set(waiting) == {4.0}  # 2 per verifier
        assert len(kv) > 170 and all(30 <= v <= 80 for v in kv)  # batch * 4 of 128 slots, %
        assert len(ttft) > 170 and all(50 <= v <= 300 for v in ttft)  # 80..200 ms sent, binned

        page.locator("#ch-tokens").scroll_into_view_if_needed()  # mouse events need it on screen
        box = page.locator("#ch-tokens .nsewdrag").bounding_box()
        assert box is not None
        y = box["y"] + box["height"] / 2
        page.mouse.move(box["x"] + box["width"] * 0.3, y)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] * 0.5, y, steps=8)
        page.mouse.up()
        zoomed = page.evaluate(rng, "ch-tokens")
        before = page.evaluate("() => document.getElementById('ch-tokens').data[0].x.length")
        page.wait_for_function(  # live points keep arriving...
            "n => document.getElementById('ch-tokens').data[0].x.length >= n + 2",
            arg=before,
            timeout=10000,
        )
        assert page.evaluate(rng, "ch-tokens") == zoomed  # ...without moving the zoomed window
        span = (zoomed[1] - zoomed[0]) / 60000
        assert 5 < span < 30, span  # a part of the hour shown

        page.mouse.dblclick(box["x"] + box["width"] * 0.4, y)
        page.wait_for_function(
            "id => { const r = document.getElementById(id).layout.xaxis.range; "
            "return new Date(r[1]) - new Date(r[0]) > 29 * 60000; }",
            arg="ch-tokens",
            timeout=5000,
        )
        reset = page.evaluate(rng, "ch-tokens")
        assert reset[1] >= zoomed[1]  # back to the live window, up to now
    finally:
        context.close()
        feeder.stop()

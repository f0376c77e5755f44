"""The live charts in a real Chromium, read from the drawn Plotly graphs: power by role drawn
side by side (not stacked), the SLO lines, the time-range control, a change marker that
appears on an open page after a k change made through the REST API, and (issue 24.9) axes
that fit, colours told apart, straight lines, labelled windows and SLO breaches in red."""

from __future__ import annotations

import colorsys
import json
import time
import urllib.request

import pytest

from fleet.accounts.services import api_key_create
from fleet.pipelines.services import pipeline_update
from fleet.telemetry.aggregation import LIVE_WINDOW_S
from fleet.telemetry.merge import ROLLUP_S
from tests.browser.fleetdata import Feeder, build
from tests.browser.pages import login

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Each trace of a chart as drawn: its stackgroup and the y Plotly computed per point (a
# stacked trace's calcdata y is the running sum; an unstacked one is the value itself).
DRAWN = """id => {
  const el = document.getElementById(id);
  return el._fullData.map((t, i) => ({
    name: t.name, stackgroup: t.stackgroup || "",
    raw: el.data[i].y, drawn: el.calcdata[i].map(p => (typeof p.y === "number" ? p.y : null)),
  }));
}"""


def _wait_chart(page, chart_id: str) -> None:
    page.wait_for_selector("#live-status.live-live", timeout=15000)
    page.wait_for_function(
        "id => { const el = document.getElementById(id); return !!(el && el.calcdata); }",
        arg=chart_id,
        timeout=10000,
    )


def _set_k(base: str, pipeline_id: int, user, k: int) -> int:
    """Set k through the REST API (the web process runs the audited service and pushes the
    new configuration after commit), with an API key of `user`."""
    _, key = api_key_create(user=user, name="k change")
    request = urllib.request.Request(
        f"{base}/api/v1/pipelines/{pipeline_id}/k-policy",
        data=json.dumps({"k_policy": {"mode": "fixed", "k": k}}).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status


def _assert_power_side_by_side(traces, history: list) -> None:
    draft, verify = traces
    assert draft["name"] == "drafting" and verify["name"] == "verification"
    assert draft["stackgroup"] == "" and verify["stackgroup"] == ""
    # the verification line is drawn at the verifiers' power, point by point, as sent
    n = len(history)
    assert n > 100, "the fleet's 30 minutes of history should be on the chart"
    for sent, drawn in zip(history, verify["drawn"][:n], strict=True):
        if sent is None:
            assert drawn is None
        else:
            assert drawn == pytest.approx(sent, abs=0.05)


# Issue 24.9 -------------------------------------------------------------------------------

# Text of a chart drawn outside its own box (the right axis' ticks were cut off).
CLIPPED_TEXT = """id => {
  const el = document.getElementById(id);
  const box = el.getBoundingClientRect();
  return [...el.querySelectorAll('.main-svg text')].filter(t => t.textContent.trim())
    .map(t => [t.textContent, t.getBoundingClientRect()])
    .filter(([, r]) => r.width && (r.right > box.right + 0.5 || r.left < box.left - 0.5))
    .map(([text, r]) => text + ' ' + Math.round(r.left) + '..' + Math.round(r.right));
}"""
# Every drawn line of every chart: its shape, and whether its SVG path bends (a spline's C/Q).
CURVES = """() => [...document.querySelectorAll('.js-plotly-plot')].flatMap(el =>
  (el._fullData || []).filter(t => t.type === 'scatter').map(t => [el.id, t.name, t.line.shape]))
  .concat([...document.querySelectorAll('.js-plotly-plot .scatterlayer path.js-line')]
    .filter(p => /[CQSTcqst]/.test(p.getAttribute('d') || '')).map(p => ['path', 'curve', 'C']))"""
BREACHES = """key => [...document.querySelectorAll('[data-k="' + key + '"]')]
  .filter(el => el.textContent.trim() && el.textContent.trim() !== '—')
  .map(el => [parseFloat(el.textContent), el.classList.contains('slo-breach')])"""


def _hue(color: str) -> float:
    r, g, b = (int(color.lstrip("#")[i : i + 2], 16) / 255 for i in (0, 2, 4))
    return colorsys.rgb_to_hsv(r, g, b)[0] * 360


def _assert_charts_tell_the_truth(page) -> None:
    """Right axes fit their chart, acceptance and α are told apart, straight lines between
    measured points, the live acceptance says its window, an SLO breach turns the figure red."""
    for chart in ("ch-rates", "ch-accept", "ch-itl"):
        assert page.evaluate(CLIPPED_TEXT, chart) == [], chart
    traces = page.evaluate(
        "() => document.getElementById('ch-accept')._fullData.map(t => [t.name, t.line.color, "
        "t.line.dash])"
    )
    (_, accept, accept_dash), (_, alpha, alpha_dash) = traces
    apart = abs(_hue(accept) - _hue(alpha))
    assert min(apart, 360 - apart) >= 60, traces  # not two greens
    assert accept_dash != alpha_dash, traces
    shapes = page.evaluate(CURVES)
    assert shapes and all(shape == "linear" for _, _, shape in shapes), shapes
    window = page.text_content("#kpis [data-window]")
    assert window in (f"last {LIVE_WINDOW_S:g} s", f"{ROLLUP_S} s rollup"), window
    # ITL p99 above its 60 ms SLO (the feeder's tail is 40-90 ms): red, and said so
    page.wait_for_selector('#kpis [data-k="itl_p99_ms"].slo-breach', timeout=10000)
    page.wait_for_selector('#kpis .kpi.kpi-breach [data-slo-note="itl_p99_ms"]')
    assert "above SLO 60 ms" in page.text_content('#kpis [data-slo-note="itl_p99_ms"]')
    for value, red in page.evaluate(BREACHES, "itl_p99_ms"):
        assert red == (value > 60.0), (value, red)
    for value, red in page.evaluate(BREACHES, "ttft_p99_ms"):  # 80-200 ms under 400 ms
        assert not red and value <= 400.0, value


def test_power_by_role_is_not_stacked(stack, chromium, viewer):
    world = build()
    feeder = Feeder(world["nodes"])
    feeder.start()
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    frames: list[str] = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda data: frames.append(data)))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        login(page, stack.url, viewer.username)
        for url in (f"/pipelines/{world['pipeline'].pk}/", f"/nodes/{world['nodes'][2][0].pk}/"):
            page.goto(stack.url + url)
            _wait_chart(page, "ch-power")
            history = page.evaluate(
                "() => JSON.parse(document.getElementById('history-data').textContent)"
                ".series.power_verify_w"
            )
            _assert_power_side_by_side(page.evaluate(DRAWN, "ch-power"), history)
        # a drafter draws no verification power however much it drafts
        drafter = page.evaluate(DRAWN, "ch-power")
        assert max(v or 0 for v in drafter[0]["drawn"]) > 10
        assert max(v or 0 for v in drafter[1]["drawn"]) == 0

        # the wall: its fleet power chart, with the live points the socket delivered
        page.goto(f"{stack.url}/wall/")
        page.wait_for_selector("#live-status.live-live", timeout=15000)
        page.wait_for_function(
            "() => { const el = document.getElementById('w-power'); "
            "return el && el.calcdata && el.data[1].y.length > 182; }",
            timeout=15000,
        )
        drawn = page.evaluate(DRAWN, "w-power")
        assert all(t["stackgroup"] == "" for t in drawn)
        sent = set()
        for text in frames:
            message = json.loads(text)
            if message.get("type") == "fleet.update":
                value = message["stats"].get("power_verify_w")
                if value is not None:
                    sent.add(round(value, 1))
        live_point = drawn[1]["drawn"][-1]
        assert round(live_point, 1) in sent, (live_point, sorted(sent)[-5:])
        assert errors == []
    finally:
        context.close()
        feeder.stop()


def test_time_range_slo_lines_and_a_change_marker(stack, chromium, viewer, operator):
    world = build()
    pipeline = world["pipeline"]
    pipeline_update(
        pipeline_id=pipeline.pk,
        actor=operator,
        changes={"slo_itl_p99_ms": 60.0, "slo_ttft_p99_ms": 400.0},
    )
    feeder = Feeder(world["nodes"])
    feeder.start()
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        login(page, stack.url, viewer.username)
        page.goto(f"{stack.url}/pipelines/{pipeline.pk}/")
        _wait_chart(page, "ch-itl")
        _wait_chart(page, "ch-rates")
        _assert_charts_tell_the_truth(page)

        # the configured SLOs are horizontal lines on the latency charts
        shapes = page.evaluate(
            "id => document.getElementById(id).layout.shapes.map(s => [s.name, s.y0, s.y1])",
            "ch-itl",
        )
        assert ["ref:itl_p99_ms", 60.0, 60.0] in shapes, shapes
        shapes = page.evaluate(
            "id => document.getElementById(id).layout.shapes.map(s => [s.name, s.y0])", "ch-ttft"
        )
        assert ["ref:ttft_p99_ms", 400.0] in shapes, shapes

        span = (
            "id => { const r = document.getElementById(id).layout.xaxis.range; "
            "return (new Date(r[1]) - new Date(r[0])) / 60000; }"
        )
        for label, minutes in (("5m", 5), ("24h", 1440), ("1h", 60)):
            page.click(f"#range-control [data-range='{label}']")
            page.wait_for_selector(f"#range-control[data-shown='{label}']", timeout=5000)
            for chart in ("ch-tokens", "ch-power", "ch-queue", "ch-rates"):
                shown = page.evaluate(span, chart)
                assert shown == pytest.approx(minutes + 5 / 60, abs=0.2), (label, chart, shown)
        points_1h = page.evaluate("() => document.getElementById('ch-tokens').data[0].x.length")
        assert points_1h >= 180  # the 30 minutes of 10 s rollups

        # a k change made while the page is open: a marker on every chart, saying who and what
        def markers(chart):
            return page.evaluate(
                "id => document.getElementById(id).layout.annotations"
                ".filter(a => a.name === 'change').map(a => a.hovertext)",
                chart,
            )

        before = len(markers("ch-tokens"))
        changed = time.monotonic()
        status = _set_k(stack.url, pipeline.pk, operator, 2)  # the operator's REST call
        assert status == 200
        page.wait_for_function(
            "n => document.getElementById('ch-tokens').layout.annotations"
            ".filter(a => a.name === 'change').length > n",
            arg=before,
            timeout=4000,
        )
        elapsed = time.monotonic() - changed
        # pushed at commit (not at the aggregator's registry refresh, 2-6 s later)
        assert elapsed <= 2.0, f"the change marker appeared {elapsed:.1f} s after the k change"
        assert page.text_content('[data-c="k"]') == "2"  # the header follows at once too
        for chart in ("ch-accept", "ch-tokens", "ch-power", "ch-itl", "ch-queue", "ch-rates"):
            notes = markers(chart)
            assert notes and "k " in notes[-1] and "→ 2" in notes[-1], (chart, notes)
            assert operator.username in notes[-1]
        lines = page.evaluate(
            "() => document.getElementById('ch-tokens').layout.shapes"
            ".filter(s => s.name === 'change').length"
        )
        assert lines == before + 1
        print(f"change marker on the open page {elapsed:.1f} s after the k change")
        assert errors == []
    finally:
        context.close()
        feeder.stop()

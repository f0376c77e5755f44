"""Issue 24.5: a move is one change seen from two pipelines. The operator gives a reason on the
page; both pipelines' audit logs show it; both pipelines' charts get a marker that names the
node (on the page that made it and on the other one, open, at once)."""

from __future__ import annotations

import re

import pytest

from tests.browser.fleetdata import build
from tests.browser.pages import login
from tests.telemetry import factories as f

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

MARKERS = (
    "() => { const el = document.getElementById('ch-tokens'); return (el && el.layout && "
    "el.layout.annotations || []).filter(a => a.name === 'change').map(a => a.hovertext); }"
)


def _moves(page) -> list[list[str]]:
    """The audit log's move rows: [when, who, action, node, change, why]."""
    rows = page.evaluate(
        "() => Array.from(document.querySelectorAll('#audit-log tbody tr')).map(tr => "
        "Array.from(tr.cells).map(td => td.textContent))"
    )
    return [
        [re.sub(r"\s+", " ", c).strip() for c in r] for r in rows if len(r) > 2 and r[2] == "move"
    ]


def test_a_move_is_audited_and_marked_on_both_pipelines(stack, chromium, operator):
    world = build()
    source = world["pipeline"]
    dest = f.pipeline(name="code-70b")
    mover = next(n for n, _, role in world["nodes"] if n.name == "gpu-verify-2")
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page, other = context.new_page(), context.new_page()
    try:
        login(page, stack.url, operator.username)
        other.goto(f"{stack.url}/pipelines/{dest.pk}/")  # the destination, open meanwhile
        other.wait_for_selector("#ch-tokens .main-svg", timeout=10000)
        other.wait_for_function(
            "() => !document.getElementById('live-status').classList.contains('live-connecting')",
            timeout=10000,
        )
        page.goto(f"{stack.url}/pipelines/{source.pk}/")
        row = page.locator(f"#actions tr:has(a:text-is('{mover.name}'))")
        form = row.locator("form.move-form")
        form.locator("select[name=to_pipeline]").select_option(str(dest.pk))
        form.locator("input[name=reason]").fill("more verify capacity for code")
        with page.expect_navigation():
            form.locator("button").click()
        assert "Node moved." in page.text_content("body")

        said = f"{mover.name} moved chat-8b → code-70b (verify)"
        # the page that made it (the source): a marker naming the node, and its audit log
        page.wait_for_selector("#ch-tokens .main-svg", timeout=10000)
        page.wait_for_function(f"() => ({MARKERS})().some(t => t.includes({said!r}))", timeout=5000)
        source_log = _moves(page)
        assert source_log, "no move in the source pipeline's audit log"
        assert (
            source_log[0][3] == mover.name and source_log[0][5] == "more verify capacity for code"
        )
        # the destination, open: the marker pushed at once, naming the node
        other.wait_for_function(
            f"() => ({MARKERS})().some(t => t.includes({said!r}))", timeout=5000
        )
        assert len([t for t in other.evaluate(MARKERS) if said in t]) == 1
        other.reload()
        dest_log = _moves(other)
        assert dest_log and dest_log[0][5] == "more verify capacity for code", dest_log
        # the node's own page: the one change, once
        page.goto(f"{stack.url}/nodes/{mover.pk}/")
        page.wait_for_selector("#ch-tokens .main-svg", timeout=10000)
        assert len([t for t in page.evaluate(MARKERS) if said in t]) == 1
    finally:
        context.close()

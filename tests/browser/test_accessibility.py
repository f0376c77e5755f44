"""Issue 24.10: the console from the keyboard and a screen reader. A skip link past the top bar,
sort headers that sort with Enter, the live status announced politely, every filter select
named, and 403/404 pages in the console's own look (not the browser's bare ones). Views kept in
the URL: the fleet's filters and sort, a pipeline page's time range."""

from __future__ import annotations

import pytest

from tests.browser.fleetdata import build
from tests.browser.pages import login

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

UNNAMED_SELECTS = """() => Array.from(document.querySelectorAll('select')).filter(s =>
  !s.getAttribute('aria-label') && !(s.labels && s.labels.length)).map(s => s.name)"""


def test_keyboard_screen_reader_and_error_pages(stack, chromium, viewer, outsider):
    world = build()
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    try:
        login(page, stack.url, viewer.username)
        page.goto(f"{stack.url}/fleet/")
        page.wait_for_selector("#nodes th[data-sort] .sort-mark", state="attached", timeout=10000)

        page.keyboard.press("Tab")  # the first stop: past the top bar
        assert page.evaluate("document.activeElement.textContent.trim()") == "Skip to content"
        page.keyboard.press("Enter")
        assert page.evaluate("document.activeElement.id") == "main"

        state = page.locator('#nodes th[data-sort="state"]')
        state.focus()
        assert page.evaluate("document.activeElement.dataset.sort") == "state"
        page.keyboard.press("Enter")
        assert state.get_attribute("aria-sort") == "ascending"
        page.keyboard.press("Enter")
        assert state.get_attribute("aria-sort") == "descending"
        # the view is in the URL (filters and sort): a reload or a shared link shows it again
        page.select_option('select[name="role"]', "draft")
        assert "sort=state" in page.url and "dir=desc" in page.url and "role=draft" in page.url
        page.reload()
        page.wait_for_selector("#nodes th[data-sort] .sort-mark", state="attached", timeout=10000)
        assert state.get_attribute("aria-sort") == "descending"
        assert page.input_value('select[name="role"]') == "draft"
        # and a pipeline page's time range
        page.goto(f"{stack.url}/pipelines/{world['pipeline'].pk}/?range=24h")
        page.wait_for_function(
            "() => { const el = document.getElementById('ch-tokens'); "
            "return !!(el && el.layout); }",
            timeout=15000,
        )
        assert page.get_attribute("#range-control [data-range='24h']", "aria-pressed") == "true"
        shown = page.evaluate(
            "() => { const r = document.getElementById('ch-tokens').layout.xaxis.range; "
            "return (new Date(r[1]) - new Date(r[0])) / 3600000; }"
        )
        assert shown == pytest.approx(24, abs=0.1)
        page.click("#range-control [data-range='5m']")
        page.wait_for_url("**range=5m**", timeout=5000)

        for path in ("/fleet/", f"/pipelines/{world['pipeline'].pk}/", "/"):
            page.goto(f"{stack.url}{path}")
            assert page.get_attribute("#live-status", "aria-live") == "polite", path
            assert page.get_attribute("#live-status", "role") == "status", path
            assert page.evaluate(UNNAMED_SELECTS) == [], path

        response = page.goto(f"{stack.url}/nodes/987654/")
        assert response.status == 404
        assert page.is_visible("header.topbar nav")  # the console around it
        assert page.text_content("h1").strip() == "Not found"
        assert "/nodes/987654/" in page.text_content("main")

        other = chromium.new_context(viewport={"width": 1440, "height": 900})
        try:
            denied = other.new_page()
            login(denied, stack.url, outsider.username)
            response = denied.goto(f"{stack.url}/fleet/")
            assert response.status == 403
            assert denied.is_visible("header.topbar nav")
            assert denied.text_content("h1").strip() == "You may not open this page"
        finally:
            other.close()
    finally:
        context.close()

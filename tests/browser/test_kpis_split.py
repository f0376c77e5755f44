"""Headline KPIs in Chromium (issue 14): the fleet page's headline is the real nodes', the
simulated beside it and labelled; the Real/Simulated filter switches the KPIs, not only the
rows; when traffic stops, the acceptance figures stay, "last measured N s ago"."""

from __future__ import annotations

import pytest

from tests.browser.fleetdata import Feeder, build
from tests.browser.pages import login, wait_live

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WATTS = "sel => parseFloat(document.querySelector(sel).textContent.replace(/[^0-9.]/g, ''))"


def test_fleet_kpis_real_simulated_and_last_measured(stack, chromium, viewer):
    world = build()  # 5 real nodes (2 GPU verifiers ~580 W each) and 1 simulated drafter
    feeder = Feeder(world["nodes"])
    feeder.start()
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    try:
        login(page, stack.url, viewer.username)
        page.goto(f"{stack.url}/fleet/")
        wait_live(page)
        power = '#totals [data-k="power"]'
        page.wait_for_function(f"sel => ({WATTS})(sel) > 900", arg=power, timeout=8000)
        assert "simulated" in page.text_content('#totals [data-k="power_src"]')  # beside it
        page.select_option('select[name="sim"]', "sim")
        page.wait_for_function(f"sel => ({WATTS})(sel) < 100", arg=power, timeout=4000)
        assert "simulated" in page.text_content('#totals [data-k="scope"]')
        page.select_option('select[name="sim"]', "real")
        page.wait_for_function(f"sel => ({WATTS})(sel) > 900", arg=power, timeout=4000)
        assert "simulated" not in page.text_content('#totals [data-k="power_src"]')

        assert page.text_content('#totals [data-k="acc"]').endswith("%")
        feeder.stop()  # traffic stops: the live window empties within seconds
        page.wait_for_function(
            "() => document.querySelector('#totals [data-k=\"acc_last\"]')"
            ".textContent.includes('last measured')",
            timeout=20000,
        )
        assert page.text_content('#totals [data-k="acc"]').endswith("%")  # not a dash
    finally:
        context.close()
        feeder.stop()

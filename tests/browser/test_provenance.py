"""Issue 24.6: every headline figure says where it comes from. Tokens per joule rests on power,
so modeled power makes it modeled: Home and the wall say so beside it. "Nodes online" counts
the real nodes as every headline does, and says the simulated ones apart; the fleet page's
"Real only" filter changes the node count too."""

from __future__ import annotations

import time

import pytest

from fleet.telemetry.ingest import publish_sample
from tests.browser.fleetdata import Feeder, build, sample
from tests.browser.pages import login, wait_live

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


class ModeledFeeder(Feeder):
    """The fleet's samples with modeled power (no NVML/RAPL sensor on these nodes)."""

    def run(self):
        while not self.halt.is_set():
            now = time.time()
            for j, (n, token, role) in enumerate(self.nodes):
                measured = sample(role, self.rng, now, phase=j, k=self.k)
                publish_sample(n.pk, {**measured, "power_source": "modeled"}, token=token)
            self.halt.wait(1.0)


def test_tokens_per_joule_and_node_counts_say_what_they_are(stack, chromium, viewer):
    world = build()  # 7 real nodes (one lost, one registered) and 1 simulated drafter
    feeder = ModeledFeeder(world["nodes"])
    feeder.start()
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    home, wall, fleet = context.new_page(), context.new_page(), context.new_page()
    try:
        login(home, stack.url, viewer.username)
        home.goto(f"{stack.url}/")
        wall.goto(f"{stack.url}/wall/")
        fleet.goto(f"{stack.url}/fleet/")
        for page in (home, wall, fleet):
            wait_live(page)
        for page, pill in ((home, '[data-o="tpj_src"]'), (wall, '[data-w="tpj_src"]')):
            page.wait_for_function(
                "sel => { const el = document.querySelector(sel); "
                "return !!el && el.textContent.includes('modeled'); }",
                arg=pill,
                timeout=8000,
            )
        # 9 nodes: 8 real (probe, spare, new among them), 1 simulated
        assert home.text_content('[data-o="nodes"]') == "8"
        assert "1 of 1 simulated node online" in home.text_content('[data-o="nodes_sim"]')
        assert wall.text_content('[data-w="nodes"]') == "8"
        assert "simulated" in wall.text_content('[data-w="nodes_sim"]')
        online = int(home.text_content('[data-o="online"]'))
        assert online == 6  # the real online ones; the simulated drafter is said apart

        nodes = '#totals [data-k="nodes"]'
        assert fleet.text_content(nodes) == "9"  # real and simulated
        fleet.select_option('select[name="sim"]', "real")
        fleet.wait_for_function(
            "sel => document.querySelector(sel).textContent === '8'", arg=nodes, timeout=4000
        )
        fleet.select_option('select[name="sim"]', "sim")
        fleet.wait_for_function(
            "sel => document.querySelector(sel).textContent === '1'", arg=nodes, timeout=4000
        )
        fleet.goto(f"{stack.url}/fleet/?sim=real")  # the first paint too
        assert fleet.text_content(nodes) == "8"
    finally:
        context.close()
        feeder.stop()

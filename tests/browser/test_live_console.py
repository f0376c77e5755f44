"""The live console in a real headless Chromium: live updates within 2 s, the wall through a
signed link surviving a server restart, and screenshots of every page."""

from __future__ import annotations

import time

import pytest

from fleet.accounts.wall_links import wall_link_create
from fleet.nodes.services import node_register
from fleet.telemetry.ingest import publish_sample
from tests.browser.fleetdata import Feeder, build
from tests.browser.pages import (
    csp_violations,
    frame_log,
    live_history,
    login,
    wait_live,
    wall_link_from_page,
)
from tests.telemetry import factories as f

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_fleet_pipeline_and_node_pages_are_live(stack, chromium, screenshots, viewer):
    world = build()
    feeder = Feeder(world["nodes"])
    feeder.start()
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    refused = csp_violations(page)
    try:
        login(page, stack.url, viewer.username)
        page.goto(f"{stack.url}/fleet/")
        wait_live(page)
        probe, token = world["probe"]
        cell = f'tr[data-id="{probe.pk}"] .c-power'
        before = page.text_content(cell)
        assert "432 W" not in before
        sent = time.monotonic()
        publish_sample(probe.pk, f.verify_sample(power_w=432.0), token=token)
        page.wait_for_function(
            "sel => { const el = document.querySelector(sel); "
            "return !!el && el.textContent.includes('432 W'); }",
            arg=cell,
            timeout=2000,
        )
        elapsed = time.monotonic() - sent
        assert elapsed <= 2.0, f"fleet page showed the new power after {elapsed:.2f} s"
        assert "measured" in page.text_content(cell)
        page.wait_for_timeout(1500)
        page.screenshot(path=str(screenshots / "fleet.png"), full_page=True)

        page.goto(f"{stack.url}/pipelines/{world['pipeline'].pk}/")
        wait_live(page)
        page.wait_for_selector("#ch-accept .main-svg", timeout=10000)
        page.wait_for_function(
            "() => document.querySelector('[data-k=\"acceptance_rate\"]')"
            ".textContent.includes('%')",
            timeout=5000,
        )
        page.wait_for_timeout(2500)
        page.screenshot(path=str(screenshots / "pipeline.png"), full_page=True)

        page.goto(f"{stack.url}/")
        wait_live(page)
        page.wait_for_selector("#overview-pipelines tr[data-id]", timeout=5000)
        page.wait_for_timeout(1000)
        page.screenshot(path=str(screenshots / "home.png"), full_page=True)

        node = world["nodes"][0][0]
        page.goto(f"{stack.url}/nodes/{node.pk}/")
        wait_live(page)
        page.wait_for_function(
            "() => document.querySelector('[data-k=\"power_w\"]').textContent.includes('W')",
            timeout=5000,
        )
        page.wait_for_timeout(2000)
        page.screenshot(path=str(screenshots / "node.png"), full_page=True)
        assert refused == [], "\n".join(refused)
    finally:
        context.close()
        feeder.stop()


def test_wall_by_signed_link_recovers_after_a_server_restart(stack, chromium, screenshots, admin):
    world = build()
    feeder = Feeder(world["nodes"])
    feeder.start()
    wall_link_create(name="Lobby (old)", actor=admin)
    # an admin creates the link on the wall-links page and copies it
    admin_context, admin_page, wall_url = wall_link_from_page(
        chromium, stack.url, admin.username, "NOC left screen"
    )
    token = wall_url.split("token=", 1)[1]
    admin_page.screenshot(path=str(screenshots / "wall-links.png"), full_page=True)
    context = chromium.new_context(viewport={"width": 1920, "height": 1080})
    page = context.new_page()
    refused = csp_violations(page)
    frames = frame_log(page)
    try:
        assert "#token=" in wall_url  # the token rides in the fragment, out of access logs
        page.goto(wall_url)
        wait_live(page)
        page.wait_for_function(
            "() => document.querySelector('[data-w=\"tps\"]').textContent !== '—'", timeout=8000
        )
        page.wait_for_timeout(2500)
        page.screenshot(path=str(screenshots / "wall.png"))
        assert refused == [], "\n".join(refused)
        nodes_before = int(page.text_content('[data-w="nodes"]'))

        stack.kill_web()
        page.wait_for_selector("#live-status:not(.live-live)", timeout=15000)
        # registered through the registry's door (which tells the aggregators at once); the
        # wall must show it after reconnecting
        node_register(name="gpu-joined-while-down", profile=f.profile(), roles=["verify"])
        stack.start_web()
        wait_live(page, timeout_ms=30000)
        page.wait_for_function(
            "n => parseInt(document.querySelector('[data-w=\"nodes\"]').textContent) === n",
            arg=nodes_before + 1,
            timeout=15000,
        )
        page.screenshot(path=str(screenshots / "wall-after-restart.png"))

        # no aggregator: the numbers stop being fresh, and the wall says so; the quiet socket
        # stays open until the page's own watchdog (8 s without a frame) reconnects, and the
        # reconnected page still says stale: connected is not live
        stack.kill_aggregator()
        killed = time.time()
        why = lambda: live_history(page, frames, since=killed)  # noqa: E731
        try:
            page.wait_for_selector("#live-status.live-stale", timeout=15000)
            page.wait_for_function(
                "since => window.__liveStates.some(([t, s]) => t > since && s.includes('down'))",
                arg=killed * 1000,
                timeout=15000,
            )
            page.wait_for_timeout(1500)
        except Exception:
            raise AssertionError(why()) from None
        first_close = min(t for t, kind, _ in frames if t > killed and kind == "close")
        last_frame = max(
            t for t, kind, _ in frames if t < first_close and kind not in ("open", "close")
        )
        assert first_close - last_frame >= 7.5, why()  # the page's watchdog, not the server
        states = page.evaluate("window.__liveStates")
        stale_at = min(t for t, state in states if t > killed * 1000 and "live-stale" in state)
        assert not [st for t, st in states if t > stale_at and "live-live" in st], why()
        assert "live-stale" in page.get_attribute("#live-status", "class"), why()
        stack.start_aggregator()
        wait_live(page, timeout_ms=20000)

        # revoking the link on the admin page darkens the screen at once
        admin_page.goto(f"{stack.url}/wall/links/")
        admin_page.click("tr:has-text('NOC left screen') button:has-text('Revoke')")
        page.wait_for_selector("#live-status.live-denied", timeout=5000)

        # the link opens the wall and nothing else
        page.goto(f"{stack.url}/fleet/?token={token}")
        assert "/login/" in page.url
    finally:
        context.close()
        admin_context.close()
        feeder.stop()

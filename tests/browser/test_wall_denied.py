"""Issue 24.3: a revoked or forged wall link is final. The screen says so for good (not "Lost
the connection… reconnecting" ~9 s later, retrying forever), and a reload says it again, with
the server's reason, instead of an empty wall."""

from __future__ import annotations

import pytest

from fleet.accounts.wall_links import wall_link_create
from tests.browser.fleetdata import Feeder, build
from tests.browser.pages import frame_log, wait_live, wall_link_from_page

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# What would undo the final refusal: the status leaving "denied" (to "connecting…").
UNDONE = "() => !document.getElementById('live-status').classList.contains('live-denied')"


def _stays_refused(page, seconds: float) -> bool:
    """True if nothing undid the refusal within `seconds` (the old page went "reconnecting"
    after ~9 s)."""
    try:
        page.wait_for_function(UNDONE, timeout=seconds * 1000)
    except Exception:  # Playwright's TimeoutError: the refusal held
        return True
    return False


def _shows_refusal(page, says: str) -> None:
    page.wait_for_selector("#wall-denied:not([hidden])", timeout=10000)
    page.wait_for_function(  # the server's reason (asked for once the socket was refused)
        "says => document.querySelector('#wall-denied [data-why]').textContent.includes(says)",
        arg=says,
        timeout=5000,
    )
    assert "live-denied" in page.get_attribute("#live-status", "class")
    assert not page.is_visible("#wall-kpis")  # not an empty wall of dashes


def test_a_revoked_wall_link_is_final_and_a_reload_says_so(stack, chromium, admin, screenshots):
    world = build()
    feeder = Feeder(world["nodes"])
    feeder.start()
    admin_context, admin_page, wall_url = wall_link_from_page(
        chromium, stack.url, admin.username, "NOC right screen"
    )
    context = chromium.new_context(viewport={"width": 1920, "height": 1080})
    page = context.new_page()
    frames = frame_log(page)

    def sockets_opened() -> int:
        return sum(1 for _, kind, _ in frames if kind == "open")

    try:
        page.goto(wall_url)
        wait_live(page)
        admin_page.click("tr:has-text('NOC right screen') button:has-text('Revoke')")
        _shows_refusal(page, "was revoked")
        opened = sockets_opened()
        assert _stays_refused(page, 16), page.evaluate("window.__liveStates")  # retry <= 15 s
        assert sockets_opened() == opened  # no reconnecting
        page.screenshot(path=str(screenshots / "wall-revoked.png"))

        page.reload()  # the token is still in the fragment; the server says why
        _shows_refusal(page, "(“NOC right screen”) was revoked")
        assert _stays_refused(page, 3)
        assert sockets_opened() == opened  # no socket at all for a refused link

        # a forged token: refused, and final
        _, good = wall_link_create(name="Lobby", actor=admin)
        forged = context.new_page()  # (only the fragment differs: a new page loads it)
        forged.goto(f"{stack.url}/wall/screen/#token={good[:-2]}xx")
        _shows_refusal(forged, "is not valid")
        assert _stays_refused(forged, 3)
    finally:
        context.close()
        admin_context.close()
        feeder.stop()

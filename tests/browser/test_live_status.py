"""The live status line judges a frame by the age of its aggregator stamp, not by its
arrival. CI caught the wall saying "live" again 8 s after the aggregator died: the page
reconnected and the server answered with the last push it held, whose stamp was newer than
any the page had seen yet already 9 s old. Here live.js runs against a fake WebSocket, so
the order of frames is exact (no server, no timing luck)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]

STALE_S = 5  # live.js
LIVE_JS = Path(__file__).resolve().parents[2] / "static" / "js" / "live.js"

FAKE_SOCKET = """
window.__sockets = [];
window.WebSocket = class {
  constructor(url) {
    this.url = url; this.readyState = 0; window.__sockets.push(this);
    setTimeout(() => { this.readyState = 1; if (this.onopen) this.onopen(); }, 5);
  }
  send() {}
  close() { this.readyState = 3; if (this.onclose) this.onclose({ code: 1006 }); }
};
window.__push = (ts) => {
  const s = window.__sockets[window.__sockets.length - 1];
  s.onmessage({ data: JSON.stringify({ type: "fleet.update", ts: ts }) });
};
"""

PAGE = (
    '<div id="live-status" class="live-status"><span class="live-label"></span></div>'
    "<script>{js}</script>"
)


def _state(page) -> str:
    return page.get_attribute("#live-status", "class") or ""


def test_a_reconnect_answered_with_an_old_push_stays_stale(chromium):
    page = chromium.new_page()
    try:
        page.set_content(PAGE.format(js=LIVE_JS.read_text()))
        page.add_script_tag(content=FAKE_SOCKET)
        page.evaluate("window.__live = new Tandem.LiveSocket('/ws/fleet/')")
        page.wait_for_function("window.__sockets.length === 1 && window.__sockets[0].readyState")
        # the aggregator pushes every half second, then dies
        for _ in range(3):
            page.evaluate("window.__push(Date.now() / 1000)")
            page.wait_for_timeout(500)
        assert "live-live" in _state(page)
        died = page.evaluate("Date.now() / 1000")
        page.wait_for_selector("#live-status.live-stale", timeout=8000)
        # the held push below must be older than STALE_S when it arrives: judged by its age,
        # not by how soon the watchdog's tick said "stale" (a frame 4.8 s old is still fresh)
        page.wait_for_function(f"Date.now() / 1000 > {died} + 0.2 + {STALE_S} + 0.3")
        # the socket drops and comes back; the server answers with the last push it held
        page.evaluate("window.__sockets[0].close()")
        page.wait_for_function("window.__sockets.length === 2 && window.__sockets[1].readyState")
        page.evaluate("ts => window.__push(ts)", died + 0.2)  # newer than any seen, yet old
        page.wait_for_timeout(300)
        assert "live-stale" in _state(page), _state(page)
        # a fresh push: live again
        page.evaluate("window.__push(Date.now() / 1000)")
        page.wait_for_selector("#live-status.live-live", timeout=2000)
    finally:
        page.close()


def test_stale_is_said_no_sooner_than_a_frame_would_count_as_old(chromium):
    """The watchdog said "stale" once the quiet spell *rounded* to STALE_S (4.5 s), while a
    frame was fresh until its age reached STALE_S unrounded: the two disagreed for half a
    second. On a fake clock: stale neither before STALE_S nor after the next tick past it."""
    page = chromium.new_page()
    try:
        page.clock.install(time=0)
        page.set_content(PAGE.format(js=LIVE_JS.read_text()))
        page.add_script_tag(content=FAKE_SOCKET)
        page.evaluate("window.__live = new Tandem.LiveSocket('/ws/fleet/')")
        page.clock.run_for(400)  # the socket opens; the watchdog ticks every 1 s from 0
        page.evaluate("window.__push(Date.now() / 1000)")
        assert "live-live" in _state(page)
        page.clock.run_for(STALE_S * 1000 - 400)  # the tick at 5 s: 4.6 s quiet
        assert "live-live" in _state(page), _state(page)
        page.clock.run_for(1000)  # the tick at 6 s: 5.6 s quiet
        assert "live-stale" in _state(page), _state(page)
    finally:
        page.close()

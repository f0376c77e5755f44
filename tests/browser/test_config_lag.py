"""Issue 24.1: the page that made a configuration change keeps showing the new configuration.
The aggregator's registry lags the database by a few seconds, so the first pipeline.update after
the change still carries the old configuration; the page rendered the new one and must not go
back to the old one."""

from __future__ import annotations

import json
import threading
import time

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from fleet.telemetry import payloads
from fleet.telemetry.snapshot import read_pipeline
from tests.browser.fleetdata import Feeder, build
from tests.browser.pages import login, wait_live

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Every text the header's configuration showed, in order (sampled every 50 ms).
HEADER_LOG = (
    "window.__config = []; setInterval(() => { const k = document.querySelector('[data-c=k]'); "
    "const v = document.querySelector('[data-c=version]'); if (!k || !v) return; "
    "const now = 'k ' + k.textContent + ' · v' + v.textContent; const s = window.__config; "
    "if (!s.length || s[s.length - 1] !== now) s.push(now); }, 50);"
)


def _push_in_thread(group: str, text: str) -> None:
    """What a lagging aggregator sends the page's group (from another thread: Playwright's
    sync API keeps an event loop in this one)."""

    def send() -> None:
        async_to_sync(payloads.send)(get_channel_layer(), group, text)

    worker = threading.Thread(target=send)
    worker.start()
    worker.join(timeout=10)


def _frames(page) -> list[str]:
    seen: list[str] = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: seen.append(payload)))
    return seen


def test_the_page_that_made_a_change_never_shows_the_old_configuration(stack, chromium, operator):
    world = build()
    pipeline = world["pipeline"]
    feeder = Feeder(world["nodes"])
    feeder.start()
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.add_init_script(HEADER_LOG)
    frames = _frames(page)
    try:
        login(page, stack.url, operator.username)
        page.goto(f"{stack.url}/pipelines/{pipeline.pk}/")
        wait_live(page)
        old = page.text_content('[data-c="version"]')
        page.wait_for_function(  # the aggregator has a snapshot of this pipeline (old config)
            "() => window.__config.length > 0", timeout=5000
        )
        stale = None
        deadline = time.monotonic() + 15
        while stale is None and time.monotonic() < deadline:
            stale = read_pipeline(pipeline.pk)
            if stale is None:
                page.wait_for_timeout(200)
        assert stale is not None, "the aggregator wrote no snapshot of the pipeline"
        assert str(stale["config"]["version"]) == old

        # the operator sets k = 2 on the page; the redirect renders the new configuration
        page.select_option("#form-k select[name=mode]", "fixed")
        page.fill("#form-k input[name=k]", "2")
        page.fill("#form-k input[name=reason]", "shorter drafts")
        with page.expect_navigation():
            page.click("#form-k button")
        wait_live(page)
        new = page.get_attribute("#form-k input[name=version]", "value")  # as rendered
        assert int(new) == int(old) + 1

        # a pipeline.update built before the change reaches the page (as the aggregator's
        # lagging registry sends it for a few seconds)
        stale["ts"] = time.time()
        _push_in_thread(payloads.pipeline_group(pipeline.pk), json.dumps(stale))
        sent = len(frames)
        deadline = time.monotonic() + 10  # it and two live updates after it were handled
        while len(frames) < sent + 3 and time.monotonic() < deadline:
            page.wait_for_timeout(200)
        assert len(frames) >= sent + 3, "no live updates after the stale one"
        page.wait_for_timeout(200)
        # the log restarted with the page the redirect loaded: it showed the new one only
        shown = page.evaluate("window.__config")
        assert shown == [f"k 2 · v{new}"], f"the header showed {shown} after the change"
    finally:
        context.close()
        feeder.stop()

"""Issue 24, alerts: a placed node whose heartbeat goes stale shows as a firing TandemNodeLost on
/alerts (since when, a link to the node and its pipeline, the count on the home page); seen
again, it moves to the resolved list. The page evaluates on load (no beat runs in this stack),
so each step is a reload. The second test kills a process that heartbeats for its node over the
real HTTP API: the alert fires, and resolves when a new one heartbeats again."""

from __future__ import annotations

import signal
import sys
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.nodes.models import Node
from tests.browser.conftest import Stack, _stop
from tests.browser.pages import login
from tests.telemetry import factories as f

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_stale_node_fires_on_the_alert_list_and_resolves_when_seen(
    stack, chromium, viewer, screenshots
):
    pipeline = f.pipeline(name="chat-8b")
    node, _ = f.node(name="gpu-verify-1")
    f.place(node, pipeline, "verify")
    Node.objects.filter(pk=node.pk).update(last_seen=timezone.now())
    row = f'tr[data-alert="node_lost:{node.pk}"]'
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    try:
        login(page, stack.url, viewer.username)
        page.goto(f"{stack.url}/alerts/")
        assert "Nothing is firing" in page.inner_text("#alerts-firing")
        assert page.locator(row).count() == 0

        stale = timezone.now() - Node.liveness_window() - timedelta(seconds=10)
        Node.objects.filter(pk=node.pk).update(last_seen=stale)
        page.reload()
        firing = page.locator(f"#alerts-firing {row}[data-state=firing]")
        firing.wait_for(timeout=10000)
        text = firing.inner_text()
        assert "TandemNodeLost" in text and "gpu-verify-1" in text and "chat-8b" in text
        assert firing.locator(f'a[href="/nodes/{node.pk}/"]').count() == 1
        assert firing.locator(f'a[href="/pipelines/{pipeline.pk}/"]').count() == 1
        assert page.locator(f"#alerts-resolved {row}").count() == 0
        assert page.locator("nav a[href='/alerts/'][aria-current=page]").count() == 1
        page.screenshot(path=str(screenshots / "alerts-firing.png"))

        page.goto(f"{stack.url}/")
        assert "1 alert firing" in page.inner_text("#alerts-firing-count")

        Node.objects.filter(pk=node.pk).update(last_seen=timezone.now())
        page.goto(f"{stack.url}/alerts/")
        resolved = page.locator(f"#alerts-resolved {row}[data-state=resolved]")
        resolved.wait_for(timeout=10000)
        assert "gpu-verify-1" in resolved.inner_text()
        assert "Nothing is firing" in page.inner_text("#alerts-firing")
        page.screenshot(path=str(screenshots / "alerts-resolved.png"))
        page.goto(f"{stack.url}/")
        assert page.locator("#alerts-firing-count").count() == 0
    finally:
        context.close()


# A node's agent as the control plane sees it: the real agent's heartbeat (inference/worker/
# agent.py `send_heartbeat`: POST .../heartbeat with the node token) every HEARTBEAT_S.
AGENT = """
import sys, time, httpx
url, node, token = sys.argv[1:4]
with httpx.Client(timeout=5, headers={"Authorization": "Bearer " + token}) as http:
    while True:
        body = {"agent_version": "tandem-agent/test"}
        http.post(f"{url}/api/v1/nodes/{node}/heartbeat", json=body).raise_for_status()
        time.sleep(0.3)
"""


@pytest.fixture
def quick_stack(transactional_db, collected_static):
    """The stack, its web process with a 4 s liveness window (2 s heartbeats x 2)."""
    s = Stack()
    s.env |= {"TANDEM_HEARTBEAT_PERIOD_S": "2", "TANDEM_HEARTBEAT_TOLERANCE": "2"}
    s.start_aggregator()
    s.start_web()
    yield s
    s.stop()


def _reload_until(page, selector: str, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while True:
        page.reload()
        if page.locator(selector).count():
            return page.locator(selector)
        assert time.monotonic() < deadline, f"{selector} never showed"
        time.sleep(0.5)


def test_a_killed_node_agent_fires_node_lost_and_resolves_when_one_heartbeats_again(
    quick_stack, chromium, viewer, screenshots
):
    pipeline = f.pipeline(name="chat-kill")
    node, token = f.node(name="gpu-killed")
    f.place(node, pipeline, "verify")
    argv = [sys.executable, "-c", AGENT, quick_stack.url, str(node.pk), token]
    agent = quick_stack._spawn("agent", argv)
    row = f'tr[data-alert="node_lost:{node.pk}"]'
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    try:
        deadline = time.monotonic() + 20
        while not Node.objects.filter(pk=node.pk, last_seen__isnull=False).exists():
            assert agent.poll() is None and time.monotonic() < deadline, "no heartbeat"
            time.sleep(0.2)
        login(page, quick_stack.url, viewer.username)
        page.goto(f"{quick_stack.url}/alerts/")
        assert page.locator(row).count() == 0  # it heartbeats
        rules = page.locator("#alert-rules tr[data-rule]")
        assert rules.count() == 11
        down = page.locator('#alert-rules tr[data-rule="TandemMetricsDown"]').inner_text()
        assert "evaluated by Prometheus only" in down

        _stop(agent, signal.SIGKILL)  # the node's agent dies without a word
        firing = _reload_until(page, f"#alerts-firing {row}[data-state=firing]")
        text = firing.inner_text()
        assert "TandemNodeLost" in text and "gpu-killed" in text and "chat-kill" in text
        assert firing.locator(f'a[href="/nodes/{node.pk}/"]').count() == 1
        assert firing.locator(f'a[href="/pipelines/{pipeline.pk}/"]').count() == 1
        node_rule = page.locator('#alert-rules tr[data-rule="TandemNodeLost"]').inner_text()
        assert "1 firing" in node_rule
        page.screenshot(path=str(screenshots / "alerts-killed-node-firing.png"))

        agent = quick_stack._spawn("agent", argv)  # the node comes back
        resolved = _reload_until(page, f"#alerts-resolved {row}[data-state=resolved]")
        assert "gpu-killed" in resolved.inner_text()
        assert page.locator(f"#alerts-firing {row}").count() == 0
        page.screenshot(path=str(screenshots / "alerts-killed-node-resolved.png"))
    finally:
        _stop(agent, signal.SIGKILL)
        context.close()

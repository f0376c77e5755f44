"""Issue 24, alerts: a placed node whose heartbeat goes stale shows as a firing TandemNodeLost on
/alerts (since when, a link to the node and its pipeline, the count on the home page); seen
again, it moves to the resolved list. The page evaluates on load (no beat runs in this stack),
so each step is a reload."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.nodes.models import Node
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

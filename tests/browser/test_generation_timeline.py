"""Issue 24: a request's timeline in a real Chromium: the path and each verify round drawn
from the ledger's row, within the CSP, nothing of the request's text on the page, and the
node page's link leading to it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from inference.models import Generation
from tests.browser.pages import csp_violations, login
from tests.factories import make_pipeline, online_node

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BARS = """() => Array.from(document.querySelectorAll('svg.rounds-strip rect.round-k')).map(r => {
  const b = r.getBoundingClientRect(); return [b.x, b.height]; })"""


def test_an_operator_reads_why_a_request_was_slow(stack, chromium, operator, screenshots):
    pipeline = make_pipeline(name="tl")
    verifier = online_node(name="tl-verifier")
    created = timezone.now() - timedelta(seconds=5)
    rows = [[40.0 + 30 * i, 4, 4 if i < 5 else 0, 8, 12.0] for i in range(10)]
    g = Generation.objects.create(
        pipeline=pipeline,
        prompt="private words",
        prompt_tokens=[1, 2, 3],
        params={"max_tokens": 32},
        state="finished",
        finish_reason="length",
        output_tokens=list(range(31)),
        output_text="private answer",
        verifier=verifier,
        attempts=1,
        created_at=created,
        started_at=created + timedelta(milliseconds=900),  # queued most of a second
        first_token_at=created + timedelta(milliseconds=960),
        finished_at=created + timedelta(milliseconds=1300),
        counters={"num_drafts": 10, "num_draft_tokens": 40, "num_accepted_tokens": 20},
        rounds={
            "t0": created.timestamp() + 0.91,
            "prefill_ms": 35.0,
            "fields": ["at_ms", "k", "accepted", "batch", "verify_ms"],
            "rounds": rows,
            "dropped": 0,
        },
    )
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    refused = csp_violations(page)
    try:
        login(page, stack.url, operator.username)
        page.goto(f"{stack.url}/nodes/{verifier.pk}/")
        page.click(f'a[href="/generations/{g.pk}/"]')
        page.wait_for_selector("svg.rounds-strip")
        page.screenshot(path=str(screenshots / "generation-timeline.png"), full_page=True)
        assert page.text_content('[data-k="queue_ms"]').strip() == "900"
        kinds = page.eval_on_selector_all(
            "#timeline-events tr[data-kind]", "rows => rows.map(r => r.dataset.kind)"
        )
        assert kinds == ["queued", "claimed", "prefill", "first_token", "finished"]
        bars = page.evaluate(BARS)
        assert len(bars) == 10
        assert [x for x, _ in bars] == sorted(x for x, _ in bars)  # in time order
        assert all(h > 0 for _, h in bars)  # k 4 drawn for every round
        accepted = page.eval_on_selector_all(
            "svg.rounds-strip rect.round-acc", "rs => rs.map(r => r.getBoundingClientRect().height)"
        )
        assert all(h > 0 for h in accepted[:5]) and all(h == 0 for h in accepted[5:])
        assert "private" not in page.content()
        assert refused == []
    finally:
        context.close()

"""Operator pages in a real headless Chromium (Debian's, through Playwright): draining and
returning a node from its pages, an API key created on its page, used on the REST API,
revoked on the page and then refused; the pipeline Actions forms laid out at their own
height, the k form showing the fields of the chosen mode only, Remove confirmed first."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from fleet.audit.models import AuditEvent
from fleet.nodes.models import Node
from tests.browser.pages import csp_violations, login
from tests.factories import make_pipeline, online_node, place
from tests.telemetry import factories as f

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Elements reaching past the right edge of the viewport (outside scrolling containers).
OVERFLOWING = """() => {
  const out = [];
  const w = document.documentElement.clientWidth;
  for (const el of document.querySelectorAll('body *')) {
    let p = el.parentElement, clipped = false;
    for (; p; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX;
      if (o === 'auto' || o === 'scroll' || o === 'hidden') { clipped = true; break; }
    }
    const r = el.getBoundingClientRect();
    if (!clipped && r.width > 0 && r.right > w + 1) {
      out.push(el.tagName + '.' + el.className + ' right=' + Math.round(r.right));
    }
  }
  return out.slice(0, 8);
}"""
SIZES = {"desktop": (1440, 900), "wide": (1920, 1080), "phone": (390, 844)}


def _profiles() -> None:
    """The hardware catalogue is seeded by a migration, which a transactional test's flush
    empties: put back the two profiles these tests use."""
    f.profile("h100-sxm")
    sram = f.profile("d-matrix-corsair")
    sram.kind, sram.tdp_w = "sram-accelerator", 275
    sram.save()


def _world():
    _profiles()
    pipeline = make_pipeline(name="serve-8b")
    node = online_node(name="gpu-a")
    place(pipeline, node, "verify")
    place(pipeline, online_node(name="gpu-b"), "verify")
    drafter = online_node(name="sram-a", profile="d-matrix-corsair", roles=("draft",))
    place(pipeline, drafter, "draft")
    make_pipeline(name="aaa-sim", simulated=True)
    make_pipeline(name="spare-real")
    return pipeline, node


def _get(url: str, key: str) -> tuple[int, dict]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_node_drain_and_return_from_the_ui(stack, chromium, screenshots, operator):
    pipeline, node = _world()
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    refused = csp_violations(page)
    try:
        login(page, stack.url, operator.username)
        page.goto(f"{stack.url}/nodes/")
        assert page.text_content("h1") == "Nodes"
        page.click('button[aria-label="Drain gpu-a"]')
        page.wait_for_selector("text=gpu-a is draining")
        assert page.url == f"{stack.url}/nodes/"
        row = page.locator("tr", has=page.locator('a:text-is("gpu-a")'))
        assert row.locator(".badge").text_content().strip() == "draining"
        assert Node.objects.get(pk=node.pk).state == "draining"
        event = AuditEvent.objects.get(action="drain", node=node)
        assert event.actor_id == operator.pk and event.pipeline_id == pipeline.pk

        page.goto(f"{stack.url}/nodes/{node.pk}/")
        page.wait_for_selector("#node-actions #node-return")
        page.screenshot(path=str(screenshots / "ops-node-actions.png"), full_page=True)
        page.fill("#node-return input[name=reason]", "patched")
        page.click("#node-return button")
        page.wait_for_selector("text=gpu-a is back in service")
        page.wait_for_selector("#node-actions #node-drain")
        assert Node.objects.get(pk=node.pk).state == "online"
        assert AuditEvent.objects.get(action="return", node=node).reason == "patched"
        assert refused == []
    finally:
        context.close()


def test_api_key_created_used_and_revoked_from_the_ui(stack, chromium, screenshots, operator):
    _world()
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    refused = csp_violations(page)
    try:
        login(page, stack.url, operator.username)
        page.goto(f"{stack.url}/")
        page.click('nav.nav >> text="API keys"')
        page.wait_for_url(f"{stack.url}/account/keys/")
        page.fill("#key-name", "browser-made")
        page.click("#create-key button[type=submit]")
        secret = page.text_content("#api-key-secret").strip()
        assert secret.startswith("tdm_")
        page.screenshot(path=str(screenshots / "ops-api-key-created.png"), full_page=True)

        status, body = _get(f"{stack.url}/api/v1/pipelines", secret)
        assert status == 200 and "serve-8b" in json.dumps(body)

        page.goto(f"{stack.url}/account/keys/")
        assert secret not in page.content()  # shown once
        prefix = secret.split("_")[1]
        row = page.locator(f'tr[data-prefix="{prefix}"]')
        assert "ago" in row.locator("td").nth(5).text_content()  # last used: just now
        row.locator("button", has_text="Revoke").click()
        page.wait_for_selector("#confirm")
        page.click('#confirm button:text-is("Revoke")')
        page.wait_for_selector("text=is revoked")
        assert "revoked" in page.locator(f'tr[data-prefix="{prefix}"]').text_content()

        status, body = _get(f"{stack.url}/api/v1/pipelines", secret)
        assert status == 401 and body["detail"] == "Invalid or revoked API key."
        assert refused == []
    finally:
        context.close()


def test_pipeline_actions_forms_layout_and_confirmation(stack, chromium, screenshots, operator):
    pipeline, node = _world()
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    refused = csp_violations(page)
    try:
        login(page, stack.url, operator.username)
        page.goto(f"{stack.url}/pipelines/{pipeline.pk}/")
        page.wait_for_selector("#actions")
        # every form at its own height: the heading's next field right below it, buttons one
        # line tall (they were 150 px tall, fields 100+ px down, beside the tall Save form)
        forms = page.locator("#actions .grid > form").all()
        assert len(forms) == 4
        for form in forms:
            title = form.locator("h3").text_content()
            boxes = [form.locator("h3").bounding_box()]
            boxes += [label.bounding_box() for label in form.locator("label").all()]
            boxes = [b for b in boxes if b and b["height"] > 0]  # fields of other k modes hidden
            for above, below in zip(boxes, boxes[1:], strict=False):
                gap = below["y"] - (above["y"] + above["height"])
                assert gap < 30, (title, gap)
            button = form.locator("button").bounding_box()
            assert button["height"] < 45, (title, button)

        k = page.locator("#form-k")

        def shown() -> set[str]:
            names = ("k", "table", "k_min", "k_max")
            return {n for n in names if k.locator(f'input[name="{n}"]').is_visible()}

        assert shown() == {"k"}  # the pipeline's policy is fixed
        k.locator('select[name="mode"]').select_option("adaptive")
        assert shown() == {"k_min", "k_max"}
        k.locator('select[name="mode"]').select_option("table")
        assert shown() == {"table"}

        move = page.locator('tr:has(a:text-is("gpu-a")) select[name="to_pipeline"]')
        assert move.input_value() == ""
        labels = move.locator("option").all_text_contents()
        assert labels == ["Move to…", "spare-real", "aaa-sim (simulated)"]

        for name, (width, height) in SIZES.items():
            page.set_viewport_size({"width": width, "height": height})
            page.screenshot(path=str(screenshots / f"ops-actions-{name}.png"), full_page=True)
        page.set_viewport_size({"width": 1440, "height": 900})

        page.locator('tr:has(a:text-is("gpu-a")) button:text-is("Remove…")').click()
        page.wait_for_selector("#confirm")
        assert "Remove gpu-a from serve-8b?" in page.text_content("#confirm h1")
        assert pipeline.placements.filter(node=node).exists()
        page.click('#confirm a:text-is("Cancel")')
        page.wait_for_selector("#actions")
        assert pipeline.placements.filter(node=node).exists()
        page.locator('tr:has(a:text-is("gpu-a")) button:text-is("Remove…")').click()
        page.click('#confirm button:text-is("Remove")')
        page.wait_for_selector("text=Node taken out of the pipeline.")
        assert not pipeline.placements.filter(node=node).exists()
        assert refused == []
    finally:
        context.close()


@pytest.mark.parametrize("size", list(SIZES))
def test_operator_pages_screenshots(stack, chromium, screenshots, admin, size):
    """The pages this work changed, at the three sizes, for people to look at."""
    pipeline, node = _world()
    width, height = SIZES[size]
    context = chromium.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    try:
        login(page, stack.url, admin.username)
        for name, path in (
            ("nodes", "/nodes/"),
            ("api-keys", "/account/keys/"),
            ("node", f"/nodes/{node.pk}/"),
        ):
            page.goto(f"{stack.url}{path}")
            page.wait_for_load_state("load")
            page.screenshot(path=str(screenshots / f"ops-{name}-{size}.png"), full_page=True)
            if name == "node":
                continue  # its charts are the live console's (checked with it)
            wide = page.evaluate(OVERFLOWING)
            assert wide == [], f"{path} at {width} px: wider than the screen: {wide}"
            scroll = page.evaluate("document.documentElement.scrollWidth")
            assert scroll <= width, f"{path} at {width} px scrolls sideways ({scroll} px)"
    finally:
        context.close()

"""Issue 24.8: the planner's preview and the what-if, as an operator uses them. A preview keeps
the action and k that were asked for (it reset k to 4), offers "Apply this preview" through the
pipeline's audited action (version-checked, audited with its reason), and the what-if's
"before" is today's fleet (each pipeline at the k policy it runs, beside what was measured),
its figures formatted, with a Δ row."""

from __future__ import annotations

import html
import re

import pytest

from fleet.audit.models import AuditEvent
from fleet.pipelines.services import pipeline_set_k_policy
from fleet.planner import whatif
from tests.pipelines.conftest import make_pipeline, online_node, place

pytestmark = pytest.mark.django_db


@pytest.fixture
def gpu_pair(pipeline):
    p = make_pipeline(name="gpu-drafted")
    place(p, online_node(name="h-v1"), "verify")
    place(p, online_node(name="h-d1"), "draft")
    place(p, online_node(name="h-d2"), "draft")
    return p


def _form(page: str, form_id: str) -> tuple[str, dict[str, str]]:
    """A form of a rendered page: its action and its named fields' values (selected options)."""
    body = re.search(rf'<form[^>]*id="{form_id}".*?</form>', page, re.S)
    assert body, f"no form #{form_id}"
    text = body.group(0)
    action = re.search(r'action="([^"]*)"', text.split(">", 1)[0])
    fields = {
        name: html.unescape(value)
        for name, value in re.findall(r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"', text)
    }
    for name, options in re.findall(r'<select name="([^"]+)">(.*?)</select>', text, re.S):
        chosen = re.search(r'<option value="([^"]*)" selected', options)
        fields[name] = chosen.group(1) if chosen else ""
    return (html.unescape(action.group(1)) if action else ""), fields


def test_a_preview_keeps_its_k_and_applies_through_the_audited_action(
    gpu_pair, operator, viewer, client
):
    client.force_login(operator)
    asked = {"preview": "1", "action": "set_k_policy", "mode": "fixed", "k": "2"}
    page = client.get(f"/planner/pipelines/{gpu_pair.pk}/", asked).content.decode()
    _, shown = _form(page, "preview-form")
    assert (shown["action"], shown["mode"], shown["k"]) == ("set_k_policy", "fixed", "2")
    assert re.search(r'id="preview-delta">Δ goodput [+-]\d+\.\d %', page)

    url, fields = _form(page, "apply-preview")
    assert url == f"/pipelines/{gpu_pair.pk}/act/k_policy"
    assert (fields["mode"], fields["k"], fields["version"]) == ("fixed", "2", "1")
    assert fields["reason"].startswith("planner preview: Δ goodput")
    answer = client.post(url, fields)
    assert answer.status_code == 302
    assert answer["Location"] == fields["next"] and "k=2" in answer["Location"]
    gpu_pair.refresh_from_db()
    assert gpu_pair.k_policy == {"mode": "fixed", "k": 2}
    event = AuditEvent.objects.filter(pipeline=gpu_pair).first()
    assert event is not None and event.actor == operator and event.reason == fields["reason"]

    # the same form again is stale now: the version check refuses it, nothing changes
    answer = client.post(url, {**fields, "k": "3"}, follow=True)
    assert b"Refused" in answer.content
    gpu_pair.refresh_from_db()
    assert gpu_pair.k_policy == {"mode": "fixed", "k": 2}

    # a node action previewed is applied by the node's action; a viewer gets no apply form
    node = online_node(name="spare-v")
    asked = {"preview": "1", "action": "place", "node": str(node.pk), "role": "verify"}
    page = client.get(f"/planner/pipelines/{gpu_pair.pk}/", asked).content.decode()
    url, fields = _form(page, "apply-preview")
    assert url == f"/pipelines/{gpu_pair.pk}/act/place"
    assert (fields["node"], fields["role"]) == (str(node.pk), "verify")
    client.force_login(viewer)
    page = client.get(f"/planner/pipelines/{gpu_pair.pk}/", asked).content.decode()
    assert 'id="apply-preview"' not in page


def test_what_if_before_is_today_and_the_change_has_a_delta(gpu_pair, operator, client):
    pipeline_set_k_policy(
        pipeline_id=gpu_pair.pk, actor=operator, k_policy={"mode": "fixed", "k": 1}
    )
    result = whatif.what_if({})
    today = next(r for r in result["before"]["pipelines"] if r["pipeline"] == gpu_pair.pk)
    assert today["k"] == 1  # the k it runs, not the model's best k
    assert result["before"]["tokens_per_s"] == result["after"]["tokens_per_s"]  # no change
    assert result["measured"] == {
        "pipelines": 0,
        "of": len(result["before"]["pipelines"]),
        "tokens_per_s": None,
        "power_w": None,
        "tokens_per_j": None,
    }

    moved = whatif.what_if({"move_to_verify": 1})
    before, after = moved["delta"]["tokens_per_s"]
    assert before == moved["before"]["tokens_per_s"] and after == moved["after"]["tokens_per_s"]

    client.force_login(operator)
    page = client.get("/planner/what-if", {"run": "1", "move_to_verify": "1"}).content.decode()
    found = re.search(r'<tr id="what-if-delta">(.*?)</tr>', page, re.S)
    assert found
    row = found.group(1)
    change = after - before
    assert f"{change:+,.1f}" in row and f"({change / before * 100:+.1f} %)" in row
    assert "No traffic measured" in page
    found = re.search(r'<table class="table" id="what-if-fleet">.*?</table>', page, re.S)
    assert found
    table = found.group(0)
    assert not re.search(r"\d\.\d{4,}", table), "figures unformatted"  # 5-decimal floats before
    assert re.search(r"\d,\d{3}", table) or after < 1000  # grouped thousands

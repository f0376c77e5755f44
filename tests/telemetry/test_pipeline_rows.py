"""A pipeline's live message stays small at any pipeline size (issue 15): it carries the
pipeline's summary and the rows of the nodes its page lists (the first
PIPELINE_ROWS_PER_ROLE per role by name), not every node of the pipeline; the page lists the
same nodes and links to the fleet page for the rest."""

from __future__ import annotations

import json
import random

import pytest

from fleet.telemetry import payloads
from fleet.telemetry.admission import Limits
from fleet.telemetry.merge import Merge
from fleet.telemetry.registry import NodeInfo, PipelineInfo, Registry
from tests.telemetry import factories as f

PER_PIPELINE = 2_500
LIMITS = Limits(tokens_per_s=1e6, steps_per_s=1e3, power_w=1000.0)


def _registry(n: int, pipelines: int = 1) -> Registry:
    reg = Registry()
    for p in range(1, pipelines + 1):
        reg.pipelines[p] = PipelineInfo(id=p, name=f"pipe-{p}", simulated=True, config={})
    names = [f"node-{i:05d}" for i in range(n * pipelines)]
    random.Random(3).shuffle(names)  # registry order is not name order
    for i, name in enumerate(names):
        nid = i + 1
        role = "verify" if i % 4 == 0 else "draft"
        reg.nodes[nid] = NodeInfo(
            id=nid,
            name=name,
            state="online",
            simulated=True,
            profile="h100",
            kind="gpu",
            pipeline_id=i % pipelines + 1,
            role=role,
            limits=LIMITS,
        )
    return reg


def _built(reg: Registry, now: float = 1000.0) -> dict:
    merge = Merge()
    rng = random.Random(7)
    for nid, info in reg.nodes.items():
        verify = info.role == "verify"
        merge.figs[nid] = [
            rng.uniform(450, 650),
            "modeled",
            rng.uniform(0.5, 0.95),
            rng.choice((8.0, 16.0)) if verify else None,
            rng.uniform(300, 900) if verify else None,
            rng.uniform(0.55, 0.8) if verify else None,
            now - rng.uniform(0, 1),
            info.role,
            True,
        ]
    return merge.build(now, reg)


def test_a_pipeline_message_carries_the_rows_its_page_lists_not_every_node():
    reg = _registry(PER_PIPELINE)
    built = _built(reg)
    msg = built["pipelines"][1]
    limit = payloads.PIPELINE_ROWS_PER_ROLE
    assert len(msg["nodes"]) == 2 * limit
    for role in ("draft", "verify"):
        names = sorted(i.name for i in reg.nodes.values() if i.role == role)
        got = [r["name"] for r in msg["nodes"] if r["role"] == role]
        assert got == names[:limit]
    # the counts stay the pipeline's
    assert msg["pipeline"]["drafters"] == PER_PIPELINE * 3 // 4
    assert msg["pipeline"]["verifiers"] == PER_PIPELINE // 4
    size = len(json.dumps(msg))
    assert size <= 40_000, size  # every row: ~500 KB
    assert len(built["snapshot"]["p:1"]) == size  # the page's first render reads the same
    print(f"\npipeline.update at {PER_PIPELINE} nodes: {size} bytes")


def test_a_small_pipeline_message_still_carries_every_row():
    reg = _registry(30)
    msg = _built(reg)["pipelines"][1]
    assert sorted(r["id"] for r in msg["nodes"]) == sorted(reg.nodes)


def test_shown_per_role_orders_by_name_within_each_role():
    items = [("verify", "b"), ("draft", "z"), ("verify", "a"), ("draft", "c"), (None, "x")]
    shown = payloads.shown_per_role(items, lambda t: t[0], lambda t: t[1], limit=1)
    assert shown == [(None, "x"), ("draft", "c"), ("verify", "a")]


@pytest.mark.django_db
def test_the_pipeline_page_lists_the_nodes_its_message_carries(client, viewer):
    from fleet.pipelines.models import Placement
    from fleet.telemetry.registry import load_registry

    limit = payloads.PIPELINE_ROWS_PER_ROLE
    p = f.pipeline("big")
    other = f.pipeline("small")
    names = [f"gpu-{i:03d}" for i in range(2 * limit + 7)]
    random.Random(1).shuffle(names)
    for i, name in enumerate(names):
        n, _ = f.node(name=name)
        f.place(n, p, "draft" if i % 2 else "verify")
    n, _ = f.node(name="lonely")
    f.place(n, other, "verify")
    client.force_login(viewer)
    html = client.get(f"/pipelines/{p.pk}/").content.decode()
    import re

    listed = [int(x) for x in re.findall(r'<tr data-id="(\d+)">', html)]
    drafters = Placement.objects.filter(pipeline=p, role="draft").count()
    verifiers = Placement.objects.filter(pipeline=p, role="verify").count()
    assert len(listed) == min(drafters, limit) + min(verifiers, limit) < len(names)
    msg = _built(load_registry())["pipelines"][p.pk]
    assert sorted(listed) == sorted(r["id"] for r in msg["nodes"])
    assert f"The first {limit} of {max(drafters, verifiers)} by name" in html
    assert f"?pipeline={p.pk}&amp;role=" in html
    small = client.get(f"/pipelines/{other.pk}/").content.decode()
    assert small.count("<tr data-id=") == 1 and "data-more" not in small

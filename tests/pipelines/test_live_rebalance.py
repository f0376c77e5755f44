"""The issue's end-to-end check: change k and move a node while generations stream through
real worker processes; every generation finishes with output identical to an undisturbed
greedy run."""

from __future__ import annotations

import time

import pytest

from fleet.audit.models import AuditEvent
from fleet.pipelines import services as pipeline_services
from fleet.pipelines.models import Pipeline, Placement
from inference import wire
from inference.selectors import stream_of
from tests.worker.helpers import (
    Workers,
    make_pipeline,
    tokens_of,
    wait_done,
    wait_online,
    write_pair,
)
from tests.worker.test_workers import inprocess, prompts, submit

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_change_k_and_move_a_node_while_generations_stream(
    live_server, tmp_path, settings, operator
):
    settings.HEARTBEAT_PERIOD_S = 1
    target, draft = write_pair(tmp_path)
    pipeline, nodes = make_pipeline(
        "live", target, draft, drafters=2, verifiers=2, max_batch_wait_ms=10
    )
    other, other_nodes = make_pipeline("other", target, draft, drafters=0, verifiers=1)
    by_name = {n.name: n for n, _, _ in nodes}
    ps = prompts(8, seed=5)
    n_tokens = 120
    expected = inprocess(target, draft, ps, max_tokens=n_tokens, ignore_eos=True)
    with Workers(tmp_path, api_url=live_server.url) as workers:
        for node, role, token in nodes + other_nodes:
            workers.start(node, role, token)
        wait_online(nodes + other_nodes, workers)
        gens = [submit(pipeline, p, n_tokens, ignore_eos=True) for p in ps]
        deadline = time.monotonic() + 60
        while min(len(tokens_of(e for _, e in stream_of(g.pk))) for g in gens) < 4:
            assert time.monotonic() < deadline, workers.logs()
            time.sleep(0.05)
        # mid-stream: a new k policy, then a drafter moves to the other pipeline
        streaming = [g for g in gens if stream_of(g.pk)[-1][1]["type"] not in wire.TERMINAL_TYPES]
        assert streaming, "every generation ended before the change: nothing was tested"
        pipeline_services.pipeline_set_k_policy(
            pipeline_id=pipeline.pk,
            actor=operator,
            k_policy={"mode": "table", "table": [[2, 6], [64, 2]]},
            expected_version=1,
            reason="live change",
        )
        moved = by_name["live-draft-1"]
        pipeline_services.node_move(
            node_id=moved.pk, to_pipeline_id=other.pk, actor=operator, reason="rebalance"
        )
        assert Placement.objects.get(node=moved).pipeline_id == other.pk
        ended = wait_done([g.pk for g in gens], timeout=180, workers=workers)
        for g, want in zip(gens, expected, strict=True):
            events = ended[str(g.pk)]
            assert events[-1]["type"] == "done", events[-1]
            assert tokens_of(events) == want
    assert Pipeline.objects.get(pk=pipeline.pk).version == 3
    assert list(
        AuditEvent.objects.filter(pipeline__in=[pipeline, other])
        .values_list("action", flat=True)
        .order_by("id")
    ) == [
        "set_k_policy",
        "move",  # a move is audited on both pipelines: the one it leaves, the one it joins
        "move",
    ]

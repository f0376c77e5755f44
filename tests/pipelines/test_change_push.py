"""A configuration change reaches the open live pages at commit (issue 14: markers took 2-6 s,
the aggregator's registry refresh): the service's audit event goes to the pipeline's and the
node's websocket groups as a `config.change` message with its chart marker."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer

from fleet.pipelines import services
from fleet.telemetry import payloads

pytestmark = pytest.mark.django_db


def _pushed(group: str, change, *, timeout: float = 2.0) -> tuple[list, list]:
    """What `group` receives while `change()` runs (sync, in this thread, its on-commit
    callbacks captured), then after its callbacks run: (before commit, after commit)."""

    async def scenario():
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        callbacks = await sync_to_async(change)()
        before = await _drain(layer, channel, 0.3)
        for callback in callbacks:
            await sync_to_async(callback)()
        return before, await _drain(layer, channel, timeout)

    return async_to_sync(scenario)()


async def _drain(layer, channel, timeout: float) -> list:
    out = []
    try:
        while True:
            event = await asyncio.wait_for(layer.receive(channel), timeout)
            out.append(json.loads(event["text"]))
            timeout = 0.2
    except TimeoutError:
        return out


def test_a_k_change_is_pushed_to_the_pipeline_group_at_commit(
    pipeline, operator, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr("fleet.pipelines.outbox.push_config", lambda pid, node_ids=None: None)

    def change():
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            services.pipeline_set_k_policy(
                pipeline_id=pipeline.pk, actor=operator, k_policy={"mode": "fixed", "k": 2}
            )
        return callbacks

    before, after = _pushed(payloads.pipeline_group(pipeline.pk), change)
    assert before == []  # nothing before commit
    (message,) = [m for m in after if m["type"] == "config.change"]
    assert message["pipeline"] == pipeline.pk
    assert message["config"]["version"] == 2
    assert message["config"]["k_policy"] == {"mode": "fixed", "k": 2}
    marker = message["marker"]
    assert marker["actor"] == operator.username and marker["action"] == "set_k_policy"
    assert marker["text"] == "k 4 → 2"


def test_a_drain_is_pushed_to_the_node_group_too(
    pipeline, operator, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr("fleet.pipelines.outbox.push_config", lambda pid, node_ids=None: None)
    drafter = pipeline.placements.get(role="draft").node

    def change():
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            services.node_drain(node_id=drafter.pk, actor=operator, force=True)
        return callbacks

    _, after = _pushed(payloads.node_group(drafter.pk), change)
    (message,) = [m for m in after if m["type"] == "config.change"]
    assert message["node"] == drafter.pk and message["marker"]["action"] == "drain"

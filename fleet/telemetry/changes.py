"""Configuration changes on the open live pages at once: when a pipeline service commits an
audited change, its chart marker (who, what) and the new configuration go to the pipeline's
and the node's websocket groups, instead of waiting for the aggregator's next registry refresh
(a few seconds) and the pages' periodic marker fetch."""

from __future__ import annotations

import asyncio
import logging
import threading

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from fleet.audit.diff import describe_change
from fleet.telemetry import payloads
from fleet.telemetry.registry import pipeline_config

log = logging.getLogger(__name__)


def message_of(event) -> payloads.ConfigChange:
    pipeline = event.pipeline
    return {
        "type": "config.change",
        "pipeline": event.pipeline_id,
        "node": event.node_id,
        "config": pipeline_config(pipeline) if pipeline is not None else None,
        "marker": {
            "ts": event.created_at.timestamp(),
            "actor": event.actor_label,
            "action": event.action,
            "text": describe_change(
                event.action,
                event.before,
                event.after,
                node=event.node.name if event.node_id is not None and event.node else None,
            ),
        },
    }


def on_change_committed(sender, *, event, **kwargs) -> None:
    """Receiver of `fleet.audit.signals.change_committed` (connected in apps.py)."""
    message = message_of(event)
    groups = []
    if message["pipeline"] is not None:
        groups.append(payloads.pipeline_group(message["pipeline"]))
    if message["node"] is not None:
        groups.append(payloads.node_group(message["node"]))
    text = payloads.encode(message)  # once for every group

    def send() -> None:
        try:
            layer = get_channel_layer()
            for group in groups:
                async_to_sync(payloads.send)(layer, group, text)
        except Exception as exc:  # Redis down: the pages see the change at their next refresh
            log.warning("change marker not pushed to %s: %r", groups, exc)

    if _loop_running():  # a sync caller inside an event loop's thread: send from another
        worker = threading.Thread(target=send, name="change-marker")
        worker.start()
        worker.join(timeout=5)
    else:
        send()


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True

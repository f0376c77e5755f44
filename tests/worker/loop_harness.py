"""The draft and verify loops wired in one process (messages handed over directly instead of
through the broker), for the loop tests here and in tests/learning: the `wired` fixture
(tests/worker/conftest.py makes it this directory's) and `run_loops`."""

from __future__ import annotations

import threading

import pytest
from django.db import connections
from django.utils import timezone

from fleet.nodes.signing import token_key
from inference import wire
from inference.ledger import Ledger
from inference.worker import engine_loop
from inference.worker.draft import DraftLoop
from inference.worker.engine_cache import load_draft_engine, load_verify_engine
from inference.worker.verify import VerifyLoop


@pytest.fixture
def wired(monkeypatch, transactional_db):
    """Loops by node id; wire.send and wire.send_from deliver straight into the target loop
    (a peer's message named by its sender, as `wire.receive` does). The ledger consumer runs
    in a thread of its own (it applies the verifier's reports)."""
    loops: dict[int, engine_loop.BaseLoop] = {}
    monkeypatch.setattr(wire, "send", lambda node, kind, p: loops[node].deliver(kind, p))

    def send_from(sender, node, kind, p):
        stamped = wire._stamped(sender, kind, p)
        assert stamped is not None, (kind, p)
        loops[node].deliver(*stamped)

    monkeypatch.setattr(wire, "send_from", send_from)
    stop = threading.Event()

    def consume():
        try:
            Ledger().run(stop)
        finally:
            connections.close_all()

    consumer = threading.Thread(target=consume, name="ledger", daemon=True)
    consumer.start()
    yield loops
    for loop in loops.values():
        loop.stop()
    stop.set()
    consumer.join(10)


def run_loops(pipeline, nodes, wired, kind):
    config = pipeline.config()
    peers = [n.pk for n, _role, _token in nodes]  # as the node session names them
    for node, _role, _token in nodes:
        # a node id of an earlier test (ids restart after a flush) may have round messages
        # left in Redis -- another pipeline's config with k 0 made the ngram loop test draft
        # nothing after tests/planner/test_apply_verification.py
        wire.discard_rounds(node.pk)
    for node, role, token in nodes:
        key = token_key(node.pk, token)
        if role == "verify":
            loop: VerifyLoop | DraftLoop = VerifyLoop(
                engine=load_verify_engine(pipeline.target_model),
                node_id=node.pk,
                pipeline_id=pipeline.pk,
                config=config,
                key=key,
                peers=peers,
            )
        else:
            loop = DraftLoop(
                engine=load_draft_engine(kind, pipeline.draft_model),
                node_id=node.pk,
                pipeline_id=pipeline.pk,
                config=config,
                key=key,
                peers=peers,
            )
        wired[node.pk] = loop
        loop.start()
        assert loop.prepared.wait(30), "the loop's start-up cost sweep did not end"
        node.last_seen = timezone.now()
        node.state = "online"
        node.save()

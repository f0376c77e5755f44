"""The drafter starts a message's new sequences together: their contexts are prefilled in one
batched forward, and a context that cannot be added costs no other sequence."""

from __future__ import annotations

import random

from inference.engine.checkpoints import load_checkpoint
from inference.engine.engines import DraftEngine
from inference.engine.sampling import SamplingParams
from inference.worker.draft import DraftLoop
from tests.worker.helpers import write_pair

GREEDY = {"temperature": 0, "max_tokens": 32}


def _contexts(n: int, seed: int = 3) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(256) for _ in range(rng.randrange(5, 30))] for _ in range(n)]


def _loop(tmp_path) -> tuple[DraftLoop, list]:
    _, draft = write_pair(tmp_path)
    model, tok = load_checkpoint(draft)
    loop = DraftLoop(
        engine=DraftEngine.from_model(model, tok, n_slots=8),
        node_id=1,
        pipeline_id=1,
        config={"k_policy": {"mode": "fixed", "k": 4}},
    )
    sent: list = []

    def send(node_id: int, kind: str, payload: dict) -> None:
        sent.append((node_id, kind, payload))

    loop.send = send  # type: ignore[method-assign]
    return loop, sent


def _start(gens: list[str], ctxs: list[list[int]]) -> dict:
    seqs = [
        {"gen": g, "attempt": 1, "ctx": c, "params": GREEDY}
        for g, c in zip(gens, ctxs, strict=True)
    ]
    return {"verifier": 9, "seqs": seqs}


def test_a_messages_new_sequences_prefill_in_one_forward_and_draft_as_one_by_one(tmp_path):
    loop, _ = _loop(tmp_path)
    calls: list[int] = []
    add_many = loop.engine.add_many

    def counted(items):
        calls.append(len(items))
        return add_many(items)

    loop.engine.add_many = counted
    gens, ctxs = ["a", "b", "c"], _contexts(3)
    loop.handle("draft_start", _start(gens, ctxs))
    assert calls == [3]
    assert loop.ready == gens and all(loop.verifier_of[g] == 9 for g in gens)

    model, tok = load_checkpoint(tmp_path / "draft")
    alone = DraftEngine.from_model(model, tok, n_slots=8)
    for g, c in zip(gens, ctxs, strict=True):
        alone.add(g, c, SamplingParams.from_json(GREEDY))
    want = [d.tokens for d in alone.propose([(g, 4) for g in gens])]
    assert [d.tokens for d in loop.engine.propose([(g, 4) for g in gens])] == want


def test_a_context_that_cannot_be_added_costs_no_other_sequence(tmp_path):
    loop, sent = _loop(tmp_path)
    ctxs = _contexts(3)
    ctxs[1] = [10_000, 5]  # out of the draft vocabulary: the batched forward fails
    loop.handle("draft_start", _start(["a", "bad", "c"], ctxs))
    assert loop.ready == ["a", "c"] and "bad" not in loop.verifier_of
    assert sent == [(9, "drafts", {"drafter": 1, "drafts": [], "plain": ["bad"]})]
    assert loop.engine.n_free == 8 - 2  # nothing of the failed batch is left allocated
    assert [len(d.tokens) for d in loop.engine.propose([("a", 4), ("c", 4)])] == [4, 4]

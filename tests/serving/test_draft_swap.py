"""A draft worker swaps its draft when the pipeline's configuration names another one (the
learned draft, when it is ready): sequences in flight move over with their contexts; a draft
that cannot be loaded leaves the old one drafting."""

from __future__ import annotations

import torch

from inference.engine.checkpoints import load_checkpoint, save_checkpoint
from inference.engine.engines import DraftEngine
from inference.engine.sampling import SamplingParams
from inference.training.self_draft import self_draft
from inference.worker.draft import DraftLoop
from tests.serving.helpers import write_pair


def _loop(sent: list) -> DraftLoop:
    config = {"drafter_kind": "ngram", "draft_model": "", "k_policy": {"mode": "fixed", "k": 3}}
    loop = DraftLoop(engine=DraftEngine.ngram(), node_id=5, pipeline_id=1, config=config)
    loop.send = lambda node, kind, p: sent.append((node, kind, p))
    return loop


def _start(loop: DraftLoop, ctxs: dict[str, list[int]]) -> None:
    params = SamplingParams(temperature=0.7, seed=3).to_json()
    seqs = [{"gen": g, "ctx": c, "params": params, "attempt": 1} for g, c in ctxs.items()]
    loop.handle("draft_start", {"verifier": 9, "seqs": seqs})


def test_a_new_draft_model_is_loaded_and_takes_the_sequences_in_flight(tmp_path):
    target, _ = write_pair(tmp_path)
    tm, tok = load_checkpoint(target)
    reduced = save_checkpoint(self_draft(tm, 1, torch.arange(0, 200)), tok, tmp_path / "learned")
    sent: list = []
    loop = _loop(sent)
    ctxs = {"a": [5, 6, 7, 5, 6], "b": [40, 41, 42]}
    _start(loop, ctxs)
    loop.handle(
        "results",
        {
            "verifier": 9,
            "results": [{"seq_id": "a", "tokens": [7, 8], "n_accepted": 1, "finished": False}],
        },
    )
    payload = {
        "pipeline": 1,
        "version": 2,
        "config": {"drafter_kind": "model", "draft_model": str(reduced)},
    }
    loop.handle("config", payload)
    d = loop.engine.drafter
    assert type(d).__name__ == "ModelDrafter" and d.vocab_ids is not None
    assert d.seqs["a"].ctx == ctxs["a"] + [7, 8] and d.seqs["b"].ctx == ctxs["b"]
    assert d.seqs["a"].params.temperature == 0.7  # its sampling parameters came along
    drafts = {x.seq_id: x for x in loop.engine.propose([("a", 3), ("b", 3)])}
    assert all(len(x.tokens) == 3 and x.probs.shape == (3, 259) for x in drafts.values())
    loop.handle("cancel", {"gen": "a"})
    assert "a" not in d.seqs  # freed on the new engine


def test_a_draft_that_cannot_be_loaded_leaves_the_old_one_drafting(tmp_path):
    sent: list = []
    loop = _loop(sent)
    _start(loop, {"a": [1, 2, 3, 1, 2]})
    old = loop.engine
    missing = str(tmp_path / "no-such-draft")
    loop.handle(
        "config", {"pipeline": 1, "config": {"drafter_kind": "model", "draft_model": missing}}
    )
    assert loop.engine is old and loop.config["draft_model"] == missing
    (draft,) = loop.engine.propose([("a", 2)])
    assert draft.tokens == [3, 1]  # the n-gram drafter still has the sequence

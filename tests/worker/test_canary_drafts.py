"""A drafter canaries a candidate draft on a share of its new sequences (issue 22): the share
is `split.in_canary` of the sequence id, the function the control plane attributes arms by;
the candidate's sequences draft with it, the rest with the serving draft; a canary that ends
moves its sequences back; a candidate that cannot be loaded is not canaried."""

from __future__ import annotations

import torch

from inference.engine.checkpoints import load_checkpoint, save_checkpoint
from inference.engine.engines import DraftEngine
from inference.engine.sampling import SamplingParams
from inference.learning.split import bucket, in_canary
from inference.training.self_draft import self_draft
from inference.worker.canary import SplitEngine
from inference.worker.draft import DraftLoop
from tests.worker.helpers import write_pair

IDS = [f"gen-{i}" for i in range(40)]


def _loop() -> DraftLoop:
    config = {"drafter_kind": "ngram", "draft_model": "", "k_policy": {"mode": "fixed", "k": 3}}
    loop = DraftLoop(engine=DraftEngine.ngram(), node_id=5, pipeline_id=1, config=config)
    loop.send = lambda node_id, kind, payload: None  # type: ignore[method-assign]
    return loop


def _start(loop: DraftLoop, ids) -> None:
    params = SamplingParams(temperature=0.7, seed=3).to_json()
    seqs = [{"gen": g, "ctx": [5, 6, 7, 5, 6], "params": params, "attempt": 1} for g in ids]
    loop.handle("draft_start", {"verifier": 9, "seqs": seqs})


def _config(loop, canary, version=2):
    cfg = {"drafter_kind": "ngram", "draft_model": "", "canary": canary}
    loop.handle("config", {"pipeline": 1, "version": version, "config": cfg})


def test_the_split_is_a_fixed_share_of_ids():
    share = sum(in_canary(f"x{i}", 0.2) for i in range(5000)) / 5000
    assert 0.17 < share < 0.23
    assert all(0 <= bucket(i) < 1 for i in IDS) and in_canary("a", 0.0) is False
    assert in_canary(IDS[3], 0.3) == in_canary(IDS[3], 0.3)


def test_a_canary_drafts_its_share_with_the_candidate_and_ends_cleanly(tmp_path):
    target, _ = write_pair(tmp_path)
    tm, tok = load_checkpoint(target)
    cand = save_checkpoint(self_draft(tm, 1, torch.arange(0, 200)), tok, tmp_path / "cand")
    loop = _loop()
    _start(loop, IDS[:10])  # before the canary: all on the serving draft
    serving = loop.engine
    _config(loop, {"version": 1, "draft_model": str(cand), "fraction": 0.5})
    split = loop.engine
    assert isinstance(split, SplitEngine) and split.main is serving
    _start(loop, IDS[10:])
    expected = {g for g in IDS[10:] if in_canary(g, 0.5)}
    assert split.on_candidate == expected and 0 < len(expected) < 30
    assert set(split.candidate.drafter.seqs) == expected
    drafts = split.propose([(g, 3) for g in IDS])
    assert [d.seq_id for d in drafts] == IDS  # in the order asked
    for d in drafts:
        on_model = d.seq_id in expected
        assert (d.probs is not None) == on_model  # the n-gram drafter gives no q
    g = sorted(expected)[0]
    loop.handle(
        "results",
        {
            "verifier": 9,
            "results": [{"seq_id": g, "tokens": [7, 8], "n_accepted": 1, "finished": False}],
        },
    )
    assert split.candidate.drafter.seqs[g].ctx == [5, 6, 7, 5, 6, 7, 8]
    loop.handle("cancel", {"gen": sorted(expected)[1]})
    assert sorted(expected)[1] not in split.candidate.drafter.seqs
    # the canary ends: the candidate's sequences go back to the serving draft with their contexts
    _config(loop, None, version=3)
    assert loop.engine is serving
    assert serving.drafter.ctx[g] == [5, 6, 7, 5, 6, 7, 8]
    assert set(serving.drafter.ctx) == set(IDS) - {sorted(expected)[1]}


def test_a_candidate_that_cannot_be_loaded_is_not_canaried(tmp_path):
    loop = _loop()
    serving = loop.engine
    _config(loop, {"version": 1, "draft_model": str(tmp_path / "missing"), "fraction": 0.5})
    assert loop.engine is serving
    _start(loop, IDS[:4])
    assert [len(d.tokens) for d in loop.engine.propose([(g, 2) for g in IDS[:4]])] == [2] * 4

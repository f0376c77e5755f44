"""Online distillation on captured pairs (`inference.training.online`) on a tiny target, in
seconds: a new draft version written whole, its held-out agreement measured; a failed run
leaves the serving draft's directory untouched; served, it changes no output."""

from __future__ import annotations

import pytest
import torch

from inference.engine.checkpoints import load_checkpoint
from inference.engine.engines import DraftEngine, VerifyEngine
from inference.engine.generator import SpeculativeGenerator, generate
from inference.engine.sampling import SamplingParams
from inference.training import learned_draft, online
from inference.training.learned_draft import draft_ready
from inference.training.online import OnlineRecipe, distil_on_pairs
from tests.worker.helpers import write_pair

RECIPE = dict(minutes=2, n_layers=1, vocab=64, batch=4, max_steps=8)


def pairs_from(target_dir, n=20):
    """(prompt, the target's own greedy output), as `capture` stores them."""
    target, tok = load_checkpoint(target_dir)
    assert tok is not None
    prompts = [tok.encode(f"pair {i}: what comes next?") for i in range(n)]
    outs = generate(
        VerifyEngine(target, max_len=96), prompts, SamplingParams(temperature=0, max_tokens=12)
    )
    return [(p, o.token_ids) for p, o in zip(prompts, outs, strict=True)]


def _snapshot(d):
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


@pytest.mark.slow  # ~10 s on 2 shared cores
def test_a_draft_cut_from_the_target_then_distilled_on_pairs_again(tmp_path):
    target_dir, _ = write_pair(tmp_path)
    pairs = pairs_from(target_dir)
    v1 = tmp_path / "learned" / "demo-v1"
    m1 = distil_on_pairs(
        target_dir, None, pairs, v1, recipe=OnlineRecipe(**RECIPE), log=lambda s: None
    )
    assert draft_ready(v1) and m1["start"] is None and m1["train"]["steps"] == 8
    assert m1["train_pairs"] == 16 and m1["heldout_pairs"] == 4
    assert 0.0 <= m1["heldout_agreement_before"] <= 1.0 and 0.0 <= m1["heldout_agreement"] <= 1.0
    draft1, _ = load_checkpoint(v1)
    assert draft1.config.num_hidden_layers == 1 and draft1.config.draft_vocab_size == 64
    # the next version starts from v1: same vocabulary, weights moved
    v2 = tmp_path / "learned" / "demo-v2"
    m2 = distil_on_pairs(
        target_dir, v1, pairs, v2, recipe=OnlineRecipe(**RECIPE), log=lambda s: None
    )
    draft2, tok = load_checkpoint(v2)
    assert m2["start"] == str(v1)
    ids1, ids2 = draft1.vocab_ids, draft2.vocab_ids
    assert isinstance(ids1, torch.Tensor) and isinstance(ids2, torch.Tensor)
    assert torch.equal(ids2, ids1)
    assert m2["heldout_agreement_before"] == pytest.approx(m1["heldout_agreement"], abs=1e-3)
    changed = [
        k for k, v in draft2.state_dict().items() if not torch.equal(v, draft1.state_dict()[k])
    ]
    assert changed and "model.embed_tokens.weight" not in changed
    # served, it changes nothing: greedy speculation equals plain decoding
    target, _ = load_checkpoint(target_dir)
    prompts = [p for p, _ in pairs[:3]]
    params = SamplingParams(temperature=0, max_tokens=12)
    plain = generate(VerifyEngine(target, max_len=96), prompts, params)
    gen = SpeculativeGenerator(
        VerifyEngine(target, max_len=96), DraftEngine.from_model(draft2, tok, max_len=96), k=3
    )
    assert [o.token_ids for o in gen.generate(prompts, params)] == [o.token_ids for o in plain]


@pytest.mark.slow
@pytest.mark.parametrize("fails_in", ["distil", "save_checkpoint"])
def test_a_failed_online_training_leaves_the_serving_draft_untouched(
    tmp_path, monkeypatch, fails_in
):
    target_dir, _ = write_pair(tmp_path)
    pairs = pairs_from(target_dir, n=10)
    serving = tmp_path / "learned" / "demo-v1"
    distil_on_pairs(
        target_dir, None, pairs, serving, recipe=OnlineRecipe(**RECIPE), log=lambda s: None
    )
    before = _snapshot(serving)

    def boom(*a, **k):
        raise RuntimeError("killed")

    if fails_in == "distil":
        monkeypatch.setattr(learned_draft, "distil", boom)
    else:
        monkeypatch.setattr(learned_draft, "save_checkpoint", boom)
    nxt = tmp_path / "learned" / "demo-v2"
    with pytest.raises(RuntimeError, match="killed"):
        distil_on_pairs(
            target_dir, serving, pairs, nxt, recipe=OnlineRecipe(**RECIPE), log=lambda s: None
        )
    assert _snapshot(serving) == before and draft_ready(serving)
    assert not draft_ready(nxt)


def test_too_few_pairs_is_refused(tmp_path):
    target_dir, _ = write_pair(tmp_path)
    with pytest.raises(ValueError, match="too few"):
        distil_on_pairs(target_dir, None, [([1, 2], [3, 4])], tmp_path / "v1", log=lambda s: None)
    assert online.HELDOUT_EVERY > 1

"""The learned draft's training (`train_draft` on a tiny target, seconds): a draft cut from
the target with a reduced head, distilled on the target's answers, saved whole; lossless when
served; a failed run leaves the draft that is served untouched."""

from __future__ import annotations

import json
import random

import pytest
import torch

from inference.engine.checkpoints import load_checkpoint
from inference.engine.engines import DraftEngine, VerifyEngine
from inference.engine.generator import SpeculativeGenerator, generate
from inference.engine.sampling import SamplingParams
from inference.training import learned_draft
from inference.training.draft_data import load_prompts, split
from inference.training.learned_draft import Recipe, draft_ready, train_learned_draft
from tests.worker.helpers import write_pair

RECIPE = dict(n_layers=1, vocab=48, max_new=12, gen_batch=8, batch=4, max_steps=6, minutes=5)


@pytest.fixture
def prompts_file(tmp_path):
    rows = [{"domain": "prose", "prompt": f"Tell me about the number {i}."} for i in range(30)]
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_shipped_prompt_set_has_hundreds_of_prompts_in_four_domains():
    rows = load_prompts()
    train, held = split(rows)
    assert len(rows) >= 300 and len({r["prompt"] for r in rows}) == len(rows)
    assert {r["domain"] for r in rows} == {"prose", "code", "qa", "chat"}
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in held} and len(held) >= 30


@pytest.mark.slow  # ~10-15 s on 2 shared cores
def test_training_a_draft_for_a_tiny_target_in_seconds(tmp_path, prompts_file):
    target_dir, _ = write_pair(tmp_path)
    out = tmp_path / "target-draft"
    m = train_learned_draft(
        target_dir, out, recipe=Recipe(**RECIPE), log=lambda s: None, prompts_file=prompts_file
    )
    assert draft_ready(out) and not (tmp_path / "target-draft.partial").exists()
    assert json.loads((out / "draft.json").read_text()) == m
    assert m["train"]["steps"] == 6 and m["timings_s"]["train_s"] < 60
    draft, tok = load_checkpoint(out)
    target, _ = load_checkpoint(target_dir)
    assert draft.config.num_hidden_layers == 1 and draft.config.draft_vocab_size == 48
    ids = draft.vocab_ids
    assert isinstance(ids, torch.Tensor)
    assert target.config.eos_token_ids[0] in ids.tolist()  # the end is draftable
    target_tok = load_checkpoint(target_dir)[1]
    assert tok is not None and target_tok is not None and tok.hash == target_tok.hash
    # served, it changes nothing: greedy output equals plain decoding's
    prompts = [tok.encode(f"question {i}: what follows?") for i in range(4)]
    params = SamplingParams(temperature=0, max_tokens=16)
    plain = generate(VerifyEngine(target, max_len=96), prompts, params)
    gen = SpeculativeGenerator(
        VerifyEngine(target, max_len=96), DraftEngine.from_model(draft, tok, max_len=96), k=4
    )
    outs = gen.generate(prompts, params)
    assert [o.token_ids for o in outs] == [o.token_ids for o in plain]
    assert gen.counters.num_draft_tokens > 0


def _snapshot(d):
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


@pytest.mark.slow  # ~10 s each on 2 shared cores: two trainings
@pytest.mark.parametrize("fails_in", ["_distil", "save_checkpoint"])
def test_a_failed_training_leaves_the_served_draft_untouched(
    tmp_path, prompts_file, monkeypatch, fails_in
):
    target_dir, _ = write_pair(tmp_path)
    out = tmp_path / "target-draft"
    train_learned_draft(
        target_dir, out, recipe=Recipe(**RECIPE), log=lambda s: None, prompts_file=prompts_file
    )
    served = _snapshot(out)
    real_save = learned_draft.save_checkpoint

    def broken(*args, **kwargs):
        if fails_in == "save_checkpoint":  # killed halfway through writing the new one
            real_save(*args, **kwargs)
        raise RuntimeError("killed")

    monkeypatch.setattr(learned_draft, fails_in, broken)
    with pytest.raises(RuntimeError, match="killed"):
        train_learned_draft(
            target_dir,
            out,
            recipe=Recipe(**RECIPE | {"seed": 1}),
            log=lambda s: None,
            prompts_file=prompts_file,
        )
    assert _snapshot(out) == served and draft_ready(out)


def test_the_learning_rate_warms_up_then_falls_to_its_floor_by_the_end():
    warmup, floor = 0.05, 0.1
    rates = [learned_draft.lr_factor(i / 100, warmup, floor) for i in range(101)]
    peak = rates.index(max(rates))
    assert 0 < rates[0] < 0.1 and abs(max(rates) - 1.0) < 0.02 and peak == 5
    assert rates[:peak] == sorted(rates[:peak]) and rates[peak:] == sorted(rates[peak:])[::-1]
    assert abs(rates[-1] - floor) < 1e-9
    assert learned_draft.lr_factor(1.7, warmup, floor) == rates[-1]  # a late step stays there


def test_the_distillation_follows_the_schedule_by_its_steps(monkeypatch):
    seen: list[float] = []

    class Opt:
        param_groups: list[dict[str, float]] = [{"lr": 0.0}]

        def zero_grad(self, set_to_none=True):
            seen.append(self.param_groups[0]["lr"])

        def step(self):
            pass

    student = torch.nn.Linear(2, 2)
    monkeypatch.setattr(learned_draft, "make_optimizer", lambda *a: Opt())
    monkeypatch.setattr(learned_draft, "_loss", lambda s, rows, hw: ((s.weight**2).sum(), 0.5))
    r = Recipe(lr=2e-3, max_steps=20)
    learned_draft.distil(
        student,
        [(0,)] * 8,
        r,
        deadline=1e18,
        rnd=random.Random(0),
        log=lambda s: None,
    )
    assert len(seen) == 20 and max(seen) <= 2e-3 + 1e-12
    assert seen[-1] < 0.2 * 2e-3 < seen[5]  # fell towards the floor by the last step

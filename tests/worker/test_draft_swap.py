"""A draft worker swaps its draft when the pipeline's configuration names another one (the
learned draft, when it is ready): sequences in flight move over with their contexts; a draft
that cannot be loaded leaves the old one drafting."""

from __future__ import annotations

import pytest
import torch

from inference.engine.checkpoints import load_checkpoint, save_checkpoint
from inference.engine.engines import DraftEngine
from inference.engine.sampling import SamplingParams
from inference.training.self_draft import self_draft
from inference.worker.draft import DraftLoop
from tests.worker.helpers import write_pair


def _loop(sent: list) -> DraftLoop:
    config = {"drafter_kind": "ngram", "draft_model": "", "k_policy": {"mode": "fixed", "k": 3}}
    loop = DraftLoop(engine=DraftEngine.ngram(), node_id=5, pipeline_id=1, config=config)
    loop.send = lambda node_id, kind, payload: sent.append((node_id, kind, payload))  # type: ignore[method-assign]
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


def test_a_new_draft_is_priced_by_its_own_costs_and_acceptance_not_the_old_ones(tmp_path):
    """Adaptive k kept the n-gram drafter's step costs, acceptance and speculative
    calibration after a swap to a model draft, so it priced the new draft's k's with the old
    draft's figures until each k had run again."""
    target, _ = write_pair(tmp_path)
    tm, tok = load_checkpoint(target)
    learned = save_checkpoint(self_draft(tm, 2, torch.arange(0, 200)), tok, tmp_path / "learned")
    loop = _loop([])
    loop.prepare()
    a = loop.adaptive
    a.draft_costs.cells = {cell: [1e-6, 50.0] for cell in a.draft_costs.cells}  # n-gram: free
    a.acceptance.observe_lengths([4] * 40, [0] * 40)  # every n-gram draft rejected
    a.calibration = {(8, 0): (1.1, 0), (8, 2): (0.6, 0)}
    a.time_ratio = {(8, 0): 1.0, (8, 2): 0.7}
    assert a.acceptance.alpha() < 0.2
    _start(loop, {"s": [5, 6, 7, 5, 6]})
    loop.handle(
        "config", {"pipeline": 1, "config": {"drafter_kind": "model", "draft_model": str(learned)}}
    )
    assert type(loop.engine.drafter).__name__ == "ModelDrafter"
    assert a is loop.adaptive and a.draft_costs.cells  # swept anew on the new draft
    assert min(c[0] for c in a.draft_costs.cells.values()) > 1e-5
    assert a.acceptance.alpha() == pytest.approx(0.5)  # the prior, not the n-gram's record
    assert a.calibration == {(8, 0): (1.1, 0)} and a.time_ratio == {(8, 0): 1.0}
    assert loop.engine.drafter.seqs["s"].ctx == [5, 6, 7, 5, 6]  # the sequence moved over


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


@pytest.mark.slow  # ~10 s: the loops, the ledger, 8 generations
def test_through_the_loops_a_swap_to_a_learned_draft_keeps_every_output(
    transactional_db,
    tmp_path,
    wired,  # noqa: F811
):
    """n-gram drafting, then the pipeline's config names a reduced-head draft: the loops load
    it between rounds and every answer, before and after, equals plain greedy decoding."""
    from fleet.pipelines.models import Pipeline
    from inference import services
    from inference.engine.engines import VerifyEngine
    from inference.engine.generator import generate
    from tests.worker.helpers import make_pipeline, tokens_of, wait_done
    from tests.worker.loop_harness import run_loops as _run
    from tests.worker.test_workers import prompts

    target, _ = write_pair(tmp_path)
    tm, tok = load_checkpoint(target)
    learned = save_checkpoint(self_draft(tm, 1, torch.arange(0, 259, 2)), tok, tmp_path / "l")
    pipeline, nodes = make_pipeline("swap", target, None, kind="ngram", max_batch_wait_ms=5)
    _run(pipeline, nodes, wired, "ngram")
    ps = prompts(4, seed=9)
    params = {"temperature": 0, "max_tokens": 20}
    want = generate(
        VerifyEngine(tm, tok, n_slots=4), ps, SamplingParams(temperature=0, max_tokens=20)
    )

    def answers():
        gens = [
            services.generation_submit(
                pipeline=pipeline, prompt="", prompt_tokens=p, params=params, user=None
            )
            for p in ps
        ]
        done = wait_done([g.pk for g in gens], timeout=60)
        return [tokens_of(done[str(g.pk)]) for g in gens]

    assert answers() == [o.token_ids for o in want]
    Pipeline.objects.filter(pk=pipeline.pk).update(drafter_kind="model", draft_model=str(learned))
    pipeline.refresh_from_db()
    services.push_pipeline_config(pipeline)
    assert answers() == [o.token_ids for o in want]
    drafter = next(wired[n.pk] for n, r, _ in nodes if r == "draft")
    assert drafter.loaded == ("model", str(learned))
    assert drafter.engine.drafter.vocab_ids is not None

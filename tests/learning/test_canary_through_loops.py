"""Through the real loops (drafter and verifier loops, the real ledger, the test Redis): a
candidate draft version is canaried on a share of sequences; the arms the control plane
measures are the sequences the drafter gave it; the verdict is audited and a promoted draft
is loaded by the drafter; every answer equals plain greedy decoding throughout."""

from __future__ import annotations

import pytest
import torch
from django.utils import timezone

from fleet.audit.models import AuditEvent
from fleet.pipelines.models import Pipeline
from inference import services
from inference.engine.checkpoints import load_checkpoint, save_checkpoint
from inference.engine.engines import VerifyEngine
from inference.engine.generator import generate
from inference.engine.sampling import SamplingParams
from inference.learning import canary
from inference.learning.models import DraftStatus, DraftVersion, LearningPolicy
from inference.learning.selectors import measured_arms
from inference.learning.split import in_canary
from inference.training.self_draft import self_draft
from inference.worker.canary import SplitEngine
from tests.worker.helpers import make_pipeline, tokens_of, wait_done, write_pair
from tests.worker.loop_harness import (
    run_loops,
    wired,  # noqa: F401  (the loops' fixture)
)
from tests.worker.test_workers import prompts

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_a_canary_through_the_loops_measures_its_arms_and_promotes(
    transactional_db,
    tmp_path,
    settings,
    wired,  # noqa: F811
):
    target, _ = write_pair(tmp_path)
    tm, tok = load_checkpoint(target)
    weak = save_checkpoint(self_draft(tm, 1, torch.arange(0, 259, 3)), tok, tmp_path / "weak")
    strong = save_checkpoint(tm, tok, tmp_path / "strong")  # the target as its own draft
    settings.MODEL_PATHS = [str(target), str(weak), str(strong)]
    pipeline, nodes = make_pipeline("canary", target, weak, max_batch_wait_ms=5)
    LearningPolicy.objects.create(
        pipeline=pipeline, enabled=True, canary_fraction=0.5, min_canary_tokens=10
    )
    run_loops(pipeline, nodes, wired, "model")
    drafter = next(wired[n.pk] for n, r, _ in nodes if r == "draft")
    since = timezone.now()
    version = DraftVersion.objects.create(
        pipeline=pipeline,
        number=1,
        path=str(strong),
        status=DraftStatus.CANDIDATE,
        detail={"canary_since": since.isoformat()},
    )
    services.push_pipeline_config(pipeline)  # what training_finished sends after commit

    params = {"temperature": 0, "max_tokens": 16}
    ids: list[str] = []
    for seed in range(4):  # until both arms have sequences (ids are random)
        ps = prompts(6, seed=20 + seed)
        want = generate(
            VerifyEngine(tm, tok, n_slots=6), ps, SamplingParams(temperature=0, max_tokens=16)
        )
        gens = [
            services.generation_submit(
                pipeline=pipeline, prompt="", prompt_tokens=p, params=params, user=None
            )
            for p in ps
        ]
        done = wait_done([g.pk for g in gens], timeout=90)
        assert [tokens_of(done[str(g.pk)]) for g in gens] == [o.token_ids for o in want]
        ids += [str(g.pk) for g in gens]
        arms = {in_canary(i, 0.5) for i in ids}
        if len(arms) == 2 and min(sum(in_canary(i, 0.5) == a for i in ids) for a in arms) >= 2:
            break
    assert isinstance(drafter.engine, SplitEngine)
    serving, cand = measured_arms(pipeline, since=since, fraction=0.5)
    assert serving.generations + cand.generations == len(ids) and cand.generations >= 2
    assert cand.acceptance == pytest.approx(1.0)  # the target drafting for itself
    assert serving.acceptance is not None and serving.acceptance < 0.9

    verdict = canary.evaluate(version)
    version.refresh_from_db()
    states = {"promote": DraftStatus.PROMOTED, "reject": DraftStatus.REJECTED}
    assert verdict in states and version.status == states[verdict]
    assert AuditEvent.objects.filter(
        pipeline=pipeline, action__in=("draft_promote", "draft_reject")
    ).exists()
    if verdict == "promote":  # unless the bigger draft lost on goodput on a loaded machine
        assert Pipeline.objects.get(pk=pipeline.pk).draft_model == str(strong)
        services.push_pipeline_config(Pipeline.objects.get(pk=pipeline.pk))
        ps = prompts(3, seed=99)
        gens = [
            services.generation_submit(
                pipeline=pipeline, prompt="", prompt_tokens=p, params=params, user=None
            )
            for p in ps
        ]
        done = wait_done([g.pk for g in gens], timeout=90)
        want = generate(
            VerifyEngine(tm, tok, n_slots=3), ps, SamplingParams(temperature=0, max_tokens=16)
        )
        assert [tokens_of(done[str(g.pk)]) for g in gens] == [o.token_ids for o in want]
        assert drafter.loaded == ("model", str(strong))
        assert not isinstance(drafter.engine, SplitEngine)  # the canary ended

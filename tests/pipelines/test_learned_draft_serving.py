"""A learned draft goes into service through the pipelines' audited door (`train_draft
--serve`): swapped once, audited, pushed; never over an operator's later choice."""

from __future__ import annotations

import io
import json

import pytest

from fleet.audit.models import AuditEvent
from fleet.pipelines.models import Pipeline
from fleet.pipelines.services import pipeline_swap_draft
from inference.learned_drafts import ACTOR, resolve_target, serve_learned_draft
from tests.factories import make_pipeline


def _model(path):
    path.mkdir(parents=True, exist_ok=True)
    tok = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}}, "added_tokens": []}
    (path / "tokenizer.json").write_text(json.dumps(tok))


@pytest.fixture
def smol(db, tmp_path, settings, monkeypatch):
    settings.DATA_DIR = tmp_path / "data"
    settings.MODEL_PATHS = []
    for name in ("smol", "smol-draft"):
        _model(tmp_path / "data" / "models" / name)
    pushed = []
    monkeypatch.setattr(
        "fleet.pipelines.bookkeeping.push_after_commit", lambda pk: pushed.append(pk)
    )
    p = make_pipeline(name="smollm2", target_model="smol", draft_model="", drafter_kind="ngram")
    return p, pushed


def test_the_learned_draft_is_swapped_in_once_audited_and_pushed(smol):
    pipeline, pushed = smol
    assert resolve_target("smollm2")[1].name == "smol"
    assert serve_learned_draft(pipeline=pipeline, draft_model="smol-draft", reason="ready")
    pipeline.refresh_from_db()
    assert (pipeline.drafter_kind, pipeline.draft_model, pipeline.version) == (
        "model",
        "smol-draft",
        2,
    )
    event = AuditEvent.objects.get(pipeline=pipeline, action="swap_draft")
    assert event.actor_label == ACTOR and event.reason == "ready"
    assert event.after["draft_model"] == "smol-draft" and pushed == [pipeline.pk]
    # the next `up` finds it serving: nothing to do
    assert not serve_learned_draft(pipeline=pipeline, draft_model="smol-draft", reason="again")
    assert Pipeline.objects.get(pk=pipeline.pk).version == 2


def test_an_operator_who_went_back_to_ngram_is_not_overruled(smol):
    pipeline, _ = smol
    serve_learned_draft(pipeline=pipeline, draft_model="smol-draft", reason="ready")
    pipeline_swap_draft(pipeline_id=pipeline.pk, actor="alice", drafter_kind="ngram")
    assert not serve_learned_draft(pipeline=pipeline, draft_model="smol-draft", reason="up")
    pipeline.refresh_from_db()
    assert pipeline.drafter_kind == "ngram" and pipeline.version == 3


@pytest.mark.slow  # ~10-20 s: trains a tiny target's draft through the command
def test_train_draft_serve_trains_then_swaps_the_pipeline(db, tmp_path, settings, monkeypatch):
    from django.core.management import call_command

    from tests.worker.helpers import write_pair

    settings.DATA_DIR = tmp_path / "data"
    settings.MODEL_PATHS = []
    models = tmp_path / "data" / "models"
    models.mkdir(parents=True)
    target, _ = write_pair(tmp_path)
    target.rename(models / "smol")
    monkeypatch.setattr("fleet.pipelines.bookkeeping.push_after_commit", lambda pk: None)
    p = make_pipeline(name="smollm2", target_model="smol", draft_model="", drafter_kind="ngram")
    args = ["--target", "smollm2", "--serve", "--minutes", "0.1", "--layers", "1"]
    call_command("train_draft", *args, "--vocab", "48", stdout=io.StringIO())
    assert (models / "smol-draft" / "draft.json").exists()
    p.refresh_from_db()
    assert (p.drafter_kind, p.draft_model) == ("model", "smol-draft")
    assert AuditEvent.objects.filter(pipeline=p, action="swap_draft", actor_label=ACTOR).exists()

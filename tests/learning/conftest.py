"""Fixtures of learning from traffic: a pipeline whose models are directories under a
temporary DATA_DIR (so swaps pass the model checks), config pushes recorded, and finished
generations made in a chosen canary arm with chosen counters."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from inference.learning.split import in_canary
from inference.models import Generation, GenerationState
from tests.pipelines.conftest import make_pipeline


def model_dir(path):
    path.mkdir(parents=True, exist_ok=True)
    tok = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}}, "added_tokens": []}
    (path / "tokenizer.json").write_text(json.dumps(tok))
    return path


@pytest.fixture
def pushed(monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(
        "fleet.pipelines.bookkeeping.push_after_commit", lambda pk: calls.append(pk)
    )
    return calls


@pytest.fixture
def learning(db, tmp_path, settings, pushed):
    settings.DATA_DIR = tmp_path / "data"
    settings.MODEL_PATHS = []
    for name in ("smol", "smol-draft", "learned/smollm2-v1", "learned/smollm2-v2"):
        model_dir(tmp_path / "data" / "models" / name)
    return make_pipeline(
        name="smollm2", target_model="smol", draft_model="smol-draft", drafter_kind="model"
    )


def finished(
    pipeline,
    *,
    user=None,
    arm=None,
    fraction=0.2,
    drafted=100,
    accepted=50,
    tokens=20,
    seconds=1.0,
    at=None,
    prompt=(1, 2, 3),
):
    """A finished generation; `arm` "canary" or "serving" picks an id in that arm."""
    while True:
        gid = uuid.uuid4()
        if arm is None or in_canary(str(gid), fraction) == (arm == "canary"):
            break
    end = at or timezone.now()
    return Generation.objects.create(
        id=gid,
        pipeline=pipeline,
        user=user,
        prompt="secret prompt",
        prompt_tokens=list(prompt),
        output_tokens=list(range(4, 4 + tokens)),
        output_text="secret output",
        state=GenerationState.FINISHED,
        created_at=end - timedelta(seconds=seconds + 0.5),
        started_at=end - timedelta(seconds=seconds),
        finished_at=end,
        counters={"num_draft_tokens": drafted, "num_accepted_tokens": accepted},
    )

"""The planner's inputs: model sizes from config/name, measured alpha and curves from the
telemetry rollups (the aggregator's `derive()` figures)."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.planner import measurements

pytestmark = pytest.mark.django_db


def test_model_spec_from_config_and_from_name(tmp_path, settings):
    settings.DATA_DIR = tmp_path
    d = tmp_path / "models" / "tiny"
    d.mkdir(parents=True)
    cfg = {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 259,
        "tie_word_embeddings": True,
    }
    (d / "config.json").write_text(json.dumps(cfg))
    spec = measurements.model_spec("tiny", default_params=1e9)
    attn = 64 * 64 * 2 + 64 * 2 * 16 * 2
    assert spec.params == 2 * (attn + 3 * 64 * 128) + 259 * 64
    assert spec.kv_dim == 32 and spec.n_layers == 2
    assert measurements.model_spec("meta-llama-3.1-70b-instruct", default_params=1).params == 70e9
    assert measurements.model_spec("qwen2.5-0.5b", default_params=1).params == 0.5e9
    assert measurements.model_spec("mystery", default_params=3e9).params == 3e9


def test_measured_from_rollups_fits_curves_and_alpha():
    rows = []
    for batch in (4, 8, 16, 32):
        k = 4
        rows.append(
            {
                "alpha": 0.8,
                "per_position_acceptance": [0.8, 0.64, 0.51, 0.41],
                "batch_mean": batch,
                "acceptance_rate": 0.59,
                "mean_acceptance_length": 1 + 0.59 * k,
                "verify_step_ms": 10 + 0.1 * batch * (k + 1),
                "draft_step_ms": 1 + 0.05 * batch,
            }
        )
    m = measurements.measured_from_rollups(rows)
    assert m["alpha"] == pytest.approx(0.8) and m["per_position"][1] == pytest.approx(0.64)
    assert m["batch_mean"] == pytest.approx(15)
    assert m["verify_curve"].a == pytest.approx(0.010) and m["verify_curve"].x == pytest.approx(
        0.0001
    )
    assert m["draft_curve"].x == pytest.approx(0.00005)
    assert "verify_curve" not in measurements.measured_from_rollups(rows[:2])  # too few points


def test_measured_reads_the_pipelines_rollups(pipeline):
    from fleet.telemetry.models import Rollup

    now = timezone.now()
    for i in range(3):
        Rollup.objects.create(
            scope="pipeline",
            scope_id=pipeline.pk,
            resolution_s=10,
            start=now - timedelta(seconds=10 * i),
            data={"alpha": 0.6, "batch_mean": 12},
        )
    Rollup.objects.create(
        scope="pipeline",
        scope_id=pipeline.pk,
        resolution_s=10,
        start=now - timedelta(hours=3),
        data={"alpha": 0.1},
    )  # too old
    m = measurements.measured(pipeline)
    assert m["alpha"] == pytest.approx(0.6) and m["samples"] == 3
    model = measurements.pipeline_model(pipeline, measured_inputs=m)
    assert model.alpha == pytest.approx(0.6) and model.n_verifiers == 1 and model.n_drafters == 1

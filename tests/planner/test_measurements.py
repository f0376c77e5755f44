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


def _agent_sample(ts: float, *, k: int, alpha: float, drafts: int = 400) -> dict:
    """One second of a verifier as the worker's agent reports it after running k=4 once:
    the per-position lists keep width 4 (the engine's counters only grow), positions >= k
    have 0 accepted AND 0 drafts."""
    from tests.telemetry.factories import verify_sample

    accepted = [round(drafts * alpha ** (i + 1)) if i < k else 0 for i in range(4)]
    return verify_sample(
        ts=ts,
        num_drafts=drafts,
        num_draft_tokens=drafts * k,
        num_accepted_tokens=sum(accepted),
        num_accepted_tokens_per_pos=accepted,
        num_draft_tokens_per_pos=[drafts if i < k else 0 for i in range(4)],
        generation_tokens=drafts + sum(accepted),
    )


def test_recommended_k_does_not_walk_down_after_k_is_lowered():
    """Issue 14: at k=2 the measured alpha fell (0.899 -> 0.821) while acceptance rose, and
    the recommended k fell with it: in auto mode this walks k down. Real samples through the
    aggregator's rollups into the planner: after an operator lowers k 4 -> 2 and acceptance
    per position rises, the measured alpha must not fall, nor the recommended k."""
    import math
    import time

    from fleet.pipelines.policy import k_for
    from fleet.planner import services
    from fleet.telemetry import rollups
    from fleet.telemetry.aggregation import Aggregation
    from fleet.telemetry.ingest import encode
    from fleet.telemetry.registry import load_registry
    from tests.telemetry import factories as f

    pipeline = f.pipeline(name="k-walk")
    v, v_token = f.node(name="gpu-k")
    d, d_token = f.node(name="sram-k")
    f.place(v, pipeline, "verify")
    f.place(d, pipeline, "draft")
    t0 = math.floor(time.time() / 10) * 10 - 300
    agg = Aggregation(clock=lambda: t0)
    agg.set_registry(load_registry())

    def run(start: float, seconds: int, *, k: int, alpha: float) -> None:
        rows = []
        for i in range(seconds):
            now = start + i + 0.5
            vs = _agent_sample(now, k=k, alpha=alpha)
            agg.ingest_entry(encode(v.id, vs, key=f.key_of(v.id, v_token)), now=now)
            ds = f.draft_sample(ts=now)
            agg.ingest_entry(encode(d.id, ds, key=f.key_of(d.id, d_token)), now=now)
            rows += agg.close_buckets(now)
        rollups.write(rows)

    def recommended() -> tuple[float, int]:
        rec = services.recommendation(pipeline=pipeline)
        assert rec["available"] is True
        batch = rec["inputs"]["batch"]
        return rec["inputs"]["alpha"], k_for(rec["k_policy"]["k_policy"], batch)

    run(t0, 120, k=4, alpha=0.80)
    alpha_k4, k_rec_k4 = recommended()
    assert alpha_k4 == pytest.approx(0.80, abs=0.01)
    run(t0 + 120, 120, k=2, alpha=0.85)  # the operator lowered k; acceptance rose
    alpha_k2, k_rec_k2 = recommended()
    assert alpha_k2 >= alpha_k4
    assert k_rec_k2 >= k_rec_k4


def test_round_overhead_is_fitted_so_the_current_config_predicts_the_served_round():
    """Forward passes explain 14 ms of a round the verifier measured at 40 ms (the rest is
    the serving path: Redis, gathering, sampling): the fitted overhead puts it back."""
    from fleet.planner.model import Curve, PipelineModel, predict

    m = PipelineModel(
        per_position=(0.8, 0.64, 0.51, 0.41),
        verify_curve=Curve(0.008, 0.0001),  # 8 ms + 0.1 ms per token scored
        draft_curve=Curve(0.0005, 0.0),  # 0.5 ms per draft step
    )
    node_rows = [
        # 10 s bucket, 250 verify steps at batch 8, k=4, always loaded: 40 ms a round
        {
            "batch_hist": {"8": 250},
            "batch_mean": 8,
            "running": 8,
            "acceptance_rate": 0.59,
            "mean_acceptance_length": 1 + 0.59 * 4,
        },
        # half the bucket idle: 125 steps in 5 s of traffic, still 40 ms a round
        {
            "batch_hist": {"8": 125},
            "batch_mean": 8,
            "running": 4,
            "acceptance_rate": 0.59,
            "mean_acceptance_length": 1 + 0.59 * 4,
        },
        {"batch_hist": {"8": 10}, "batch_mean": 8, "running": 0.5},  # mostly idle: not used
    ]
    rounds = measurements.round_points(node_rows)
    assert [r[2] for r in rounds] == pytest.approx([0.04, 0.04])
    assert [r[3] for r in rounds] == [250, 125]
    curve = measurements.fit_overhead(m, rounds)
    p = predict(m.with_(overhead_curve=curve), k=4, batch=8)
    assert p.round_s == pytest.approx(0.040, rel=1e-3)
    assert p.goodput_tps == pytest.approx(8 * m.E(4) / 0.040, rel=1e-3)
    assert predict(m, k=4, batch=8).round_s == pytest.approx(0.014)  # without: 3x too fast


def test_measured_row_beside_the_prediction(pipeline, viewer):
    """The recommendations page shows what was measured at the pipeline's k and batch, and
    the prediction at that same k and batch with its error."""
    from django.test import Client

    from fleet.telemetry.models import Rollup

    now = timezone.now()
    verifier = pipeline.placements.get(role="verify").node_id
    for i in range(5):  # the verifier's buckets: loaded, except the oldest (traffic started)
        Rollup.objects.create(
            scope="node",
            scope_id=verifier,
            resolution_s=10,
            start=now - timedelta(seconds=10 * (i + 1)),
            data={"batch_mean": 8, "running": 8 if i < 4 else 1, "batch_hist": {"8": 100}},
        )
    for i in range(3):
        Rollup.objects.create(
            scope="pipeline",
            scope_id=pipeline.pk,
            resolution_s=10,
            start=now - timedelta(seconds=10 * (i + 1)),
            data={
                "tokens_per_s": 300.0 + i,
                "batch_mean": 8,
                "acceptance_rate": 0.6,
                "mean_acceptance_length": 1 + 0.6 * 4,
                "alpha": 0.8,
                "power_w": 800.0,
                "power_source": "modeled",
                "itl_mean_ms": 11.0,
            },
        )
    Rollup.objects.create(  # another k (2): not the row's
        scope="pipeline",
        scope_id=pipeline.pk,
        resolution_s=10,
        start=now - timedelta(seconds=40),
        data={
            "tokens_per_s": 900.0,
            "batch_mean": 8,
            "acceptance_rate": 0.7,
            "mean_acceptance_length": 2.4,
        },
    )
    Rollup.objects.create(  # k=4 but traffic only started: not under load
        scope="pipeline",
        scope_id=pipeline.pk,
        resolution_s=10,
        start=now - timedelta(seconds=50),
        data={"tokens_per_s": 20.0, "batch_mean": 8, "acceptance_rate": 0.6},
    )
    row = measurements.measured_row(pipeline)
    assert row is not None
    assert row["k"] == 4 and row["buckets"] == 3
    assert row["goodput_tps"] == pytest.approx(301) and row["power_w"] == 800
    c = Client()
    c.force_login(viewer)
    html = c.get(f"/planner/pipelines/{pipeline.pk}/").content.decode()
    measured = html.split('id="measured-row"')[1].split("</tr>")[0]
    assert 'data-m="goodput">301.0<' in measured and "measured" in measured
    assert 'id="predicted-at-measured"' in html


def test_the_planner_prices_acceptance_per_position_asked():
    """A bucket with the drafter's rounds gives acceptance per sequence-round asked; the
    planner takes it over vLLM's per draft made (which ignores rounds without a proposal)."""
    rows = [
        {"per_position_acceptance": [1.0, 0.5], "per_position_asked": [0.25, 0.125]},
        {"per_position_acceptance": [0.8, 0.4]},  # no drafter rounds in this bucket
    ]
    m = measurements.measured_from_rollups(rows)
    assert m["per_position"] == pytest.approx((0.525, 0.2625))

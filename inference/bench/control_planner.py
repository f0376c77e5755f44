"""bench_control's planner figures: the planner's goodput model, fed by what the real nodes
measured, against the runs it predicts; the simulator's roofline against the same runs; and 20
random simulated fleets through the planner's telemetry path."""

from __future__ import annotations

import random
import statistics
from typing import Any


def _client_rates(m, measured: dict, n: int, tokens: int) -> dict[int, float]:
    """What n clients measure for each k from the model's per-sequence rate r(k): a request
    of `tokens` tokens takes F + tokens / r(k), where F (submit, claim, prefill, the stream's
    open and close: a request's cost, whatever its k) is calibrated on the other k's measured
    runs (their median), never on the run being predicted. Calibrated on plain decoding's run
    alone, one slow run (59 tokens/s where others measured 71-84) damped every prediction
    (54.7 % error at k 8), and k 0's own prediction was its measurement (0 % by construction)."""
    from fleet.planner.model import predict

    rate = {k: predict(m, k=k, batch=n).goodput_tps / n for k in measured}
    overhead = {
        k: max(n * tokens / measured[k] - tokens / r, 0.0)
        for k, r in rate.items()
        if r and measured[k]
    }
    out = {}
    for k, r in rate.items():
        others = [f for kk, f in overhead.items() if kk != k]
        fixed = statistics.median(others) if others else 0.0
        out[k] = n * tokens / (fixed + tokens / r) if r else 0.0
    return out


def planner_errors(nodes, cells, pipeline, log, requests_tokens: int) -> dict:
    """The planner's goodput model fed by what the real nodes measured (their cost tables and
    round trip, each run's acceptance) predicts every fixed k; its recommended k against
    that k's measured run. A request's fixed cost on the client/web path (outside the model's
    rounds) is taken from the other k's measured runs (`_client_rates`); the drafter's
    calibration (what its adaptive rounds realized against the model, by batch and k) scales
    the model as the planner's own pages do. Then the simulator's
    roofline for this machine's CPU profile, calibrated the same way."""
    from fleet.planner import measurements
    from fleet.planner.adaptive import AdaptiveK
    from fleet.planner.costs import StepCosts
    from fleet.planner.model import Hardware, PipelineModel, round_of
    from fleet.planner.node_costs import calibration_from_json
    from inference.selectors import node_inspect

    draft, verify = ((node_inspect(nodes[r][0].pk) or {}) for r in ("draft", "verify"))
    snap = draft.get("adaptive") or {}
    a = AdaptiveK()
    a.draft_costs = StepCosts.from_json(snap.get("draft_costs"))
    a.verify_costs = StepCosts.from_json(verify.get("step_costs"))
    a.hop_s = (snap.get("hop_ms") or 0.0) / 1000
    a.rest_costs = StepCosts.from_json(snap.get("rest_costs"))
    cpu = Hardware.from_profile(nodes["verify"][0].profile)
    sim = PipelineModel(
        verifier=cpu,
        drafter=cpu,
        target=measurements.model_spec(pipeline.target_model, default_params=1e8),
        draft=measurements.model_spec(pipeline.draft_model, default_params=1e7),
    )
    errors: list[float] = []
    sim_cpu: list[float] = []
    out: dict[str, Any] = {}
    tokens = requests_tokens  # tokens a request asks for (each client runs them in turn)
    for (n, phase), c in cells.items():
        per_pos = tuple(c["per_position"])
        if c.get("drafter"):  # the cell's own cost inputs (bench_control's _measure)
            here = c["drafter"]
            a.draft_costs = StepCosts.from_json(here.get("draft_costs"))
            a.verify_costs = StepCosts.from_json(c.get("verify_costs") or here.get("verify_costs"))
            a.hop_s = (here.get("hop_ms") or 0.0) / 1000
            a.rest_costs = StepCosts.from_json(here.get("rest_costs"))
        m, _vb = a.model(n)
        # and what the drafter's rounds realized against its model, as the planner reads it
        calibration = calibration_from_json((c.get("drafter") or {}).get("calibration"))
        m = m.with_(
            per_position=per_pos,
            alpha=None if per_pos else 0.5,
            n_drafters=1,
            calibration=calibration,
        )
        roof = sim.with_(per_position=per_pos, alpha=None if per_pos else 0.5)
        pred = _client_rates(m, c["fixed"], n, tokens)
        best = max(pred, key=lambda k: pred[k])
        err = abs(pred[best] - c["fixed"][best]) / c["fixed"][best] * 100
        errors.append(err)
        rp = _client_rates(roof, c["fixed"], n, tokens)
        sim_cpu.append(max(abs(rp[k] - v) / v * 100 for k, v in c["fixed"].items()))
        rounds = {k: round_of(m, k=k, batch=n) for k in c["fixed"]}
        out[f"planner_real_n{n}_{phase}"] = {
            "model_round_ms": {  # the model's inputs: what each predicted round is made of
                str(k): {
                    "verify": round(r.t_verify * 1000, 2),
                    "draft": round(r.draft_time * 1000, 2),
                    "rest": round(m.rest_s(n, k) * 1000, 2),
                    "expected_tokens": round(r.expected_tokens, 3),
                }
                for k, r in rounds.items()
            },
            "recommended_k": best,
            "measured_best_k": max(c["fixed"], key=lambda k: c["fixed"][k]),
            "predicted_tokens_per_s": {str(k): round(v, 1) for k, v in pred.items()},
            "error_pct": round(err, 1),
            "per_position": [round(p, 3) for p in per_pos],
        }
    out["planner_real_error_max_pct"] = round(max(errors), 1)
    out["sim_vs_real_cpu_error_pct"] = round(max(sim_cpu), 1)
    log(
        f"planner error: real {[round(e, 1) for e in errors]} %; "
        f"CPU roofline vs real, worst k: {max(sim_cpu):.1f} %"
    )
    return out


def simulated_errors(n: int = 20) -> list[float]:
    """20 random simulated fleets: telemetry of the current configuration (with sampling
    noise) -> the planner's model -> its recommended k; the simulator's physics at that k
    is what the simulated fleet then measures."""
    from fleet.nodes.models import HardwareProfile
    from fleet.planner import measurements
    from fleet.planner.model import Hardware, ModelSpec, PipelineModel, predict
    from fleet.planner.recommend import best_k_at

    rng = random.Random(11)
    gpus = [Hardware.from_profile(p) for p in HardwareProfile.objects.filter(kind="gpu")]
    drafters = [Hardware.from_profile(p) for p in HardwareProfile.objects.exclude(kind="cpu")]
    errors = []
    for _ in range(n):
        truth = PipelineModel(
            alpha=rng.uniform(0.4, 0.9),
            verifier=rng.choice(gpus),
            drafter=rng.choice(drafters),
            target=ModelSpec("t", rng.choice([8e9, 70e9]), n_layers=32),
            draft=ModelSpec("d", rng.choice([0.5e9, 1e9]), n_layers=16, kv_dim=512),
            n_verifiers=rng.randint(1, 4),
            n_drafters=rng.randint(1, 4),
        )
        batch, k = rng.choice([4, 16, 26, 64]), rng.randint(1, 6)
        at = predict(truth, k=k, batch=batch)
        rows = [
            {
                "alpha": truth.alpha,
                "batch_mean": batch,
                "acceptance_rate": (at.expected_tokens * rng.uniform(0.95, 1.05) - 1) / k,
                "mean_acceptance_length": at.expected_tokens,
                "verify_step_ms": truth.t_verify(batch, batch * (k + 1)) * 1000,
                "draft_step_ms": truth.t_draft(batch * truth.n_verifiers / truth.n_drafters) * 1000,
            }
            for _ in range(30)
        ]
        seen = measurements.measured_from_rollups(rows, default_k=k)
        planned = truth.with_(
            alpha=seen.get("alpha", truth.alpha),
            verify_scale=measurements.verify_scale(truth, seen["verify_points"])
            if seen.get("verify_points")
            else 1.0,
        )
        rec = best_k_at(planned, batch)
        real = predict(truth, k=rec.k, batch=batch).goodput_tps
        errors.append(abs(rec.goodput_tps - real) / real * 100)
    return errors

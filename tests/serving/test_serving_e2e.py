"""The proof: the official `openai` client, unchanged, against daphne (the production ASGI server, a
subprocess) and REAL worker processes (`manage.py run_node`, one drafter and one verifier, real
Redis, the test database) -- greedy output equals the engine's in-process output for the same prompt
ids."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from django.utils import timezone

from fleet.accounts.services import api_key_create
from inference.models import Generation
from inference.selectors import stream_of

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

MAX_TOKENS = 20


def greedy_inprocess(target, draft, prompt_ids: list[list[int]], max_tokens: int):
    from inference.engine.checkpoints import load_checkpoint
    from inference.engine.engines import DraftEngine, VerifyEngine
    from inference.engine.generator import SpeculativeGenerator
    from inference.engine.sampling import SamplingParams

    tm, tok = load_checkpoint(target)
    dm, _ = load_checkpoint(draft)
    gen = SpeculativeGenerator(
        VerifyEngine(tm, tok, n_slots=len(prompt_ids)),
        DraftEngine.from_model(dm, tok, n_slots=len(prompt_ids)),
        k=4,
    )
    outs = gen.generate(prompt_ids, SamplingParams(temperature=0.0, max_tokens=max_tokens))
    return [o.token_ids for o in outs]


def test_openai_client_through_real_workers(daphne_url, tmp_path, operator, settings):
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
    prompts = ["def main(", "import os\n", "class A:", "for i in "]

    with Workers(tmp_path, api_url=daphne_url) as workers:
        for node, role, token in nodes:
            workers.start(node, role, token)
        wait_online(nodes, workers)
        try:
            _exercise(client, pipeline, prompts, target, draft, workers)
            _client_leaves(daphne_url, key, pipeline, nodes, workers)
        except openai.APIError as exc:
            raise AssertionError(f"{exc!r}\n{workers.logs()}") from exc


def _exercise(client, pipeline, prompts, target, draft, workers):
    if True:
        assert [m.id for m in client.models.list()] == ["e2e"]

        # Non-streaming and streaming completions, concurrently (the verifier batches them).
        def complete(prompt):
            return client.completions.create(
                model="e2e", prompt=prompt, max_tokens=MAX_TOKENS, temperature=0
            )

        def stream(prompt):
            chunks = list(
                client.completions.create(
                    model="e2e",
                    prompt=prompt,
                    max_tokens=MAX_TOKENS,
                    temperature=0,
                    stream=True,
                    stream_options={"include_usage": True},
                )
            )
            text = "".join(c.choices[0].text for c in chunks if c.choices)
            reason = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
            return text, reason, chunks[-1].usage

        with ThreadPoolExecutor(8) as pool:
            plain = list(pool.map(complete, prompts))
            streamed = list(pool.map(stream, prompts))

        gens = list(Generation.objects.filter(pipeline=pipeline).order_by("created_at"))
        assert len(gens) == 2 * len(prompts)
        by_prompt: dict[str, list[Generation]] = {}
        for g in gens:
            by_prompt.setdefault(g.prompt, []).append(g)
        ids = [by_prompt[p][0].prompt_tokens for p in prompts]
        expected = greedy_inprocess(target, draft, ids, MAX_TOKENS)
        for prompt, result, (text, reason, usage), want in zip(
            prompts, plain, streamed, expected, strict=True
        ):
            assert result.choices[0].text == text  # stream and not: same greedy text
            assert result.usage.completion_tokens == usage.completion_tokens == len(want)
            assert result.choices[0].finish_reason == reason
            assert reason == ("length" if len(want) == MAX_TOKENS else "stop")
            for g in by_prompt[prompt]:  # the rows the verifier wrote: the engine's tokens
                deadline = time.monotonic() + 20
                while (g := Generation.objects.get(pk=g.pk)).state != "finished":
                    assert time.monotonic() < deadline, workers.logs()
                    time.sleep(0.1)
                assert g.output_tokens == want
                assert g.output_text == text

        # A stop sequence taken from the middle of a greedy text cuts it there.
        full = plain[0].choices[0].text
        at = next(
            (
                i
                for i in range(3, len(full) - 1)
                if full.find(full[i : i + 2]) == i and "\ufffd" not in full[i : i + 2]
            ),
            None,
        )
        assert at is not None, f"no usable stop sequence in {full!r}"
        cut = client.completions.create(
            model="e2e",
            prompt=prompts[0],
            max_tokens=MAX_TOKENS,
            temperature=0,
            stop=[full[at : at + 2]],
        )
        assert cut.choices[0].text == full[:at]
        assert cut.choices[0].finish_reason == "stop"

        # Chat, streamed and not (the byte-level model gets a plain transcript).
        messages = [{"role": "user", "content": "hello"}]
        chat = client.chat.completions.create(
            model="e2e", messages=messages, max_tokens=MAX_TOKENS, temperature=0
        )
        chunks = list(
            client.chat.completions.create(
                model="e2e", messages=messages, max_tokens=MAX_TOKENS, temperature=0, stream=True
            )
        )
        assert chunks[0].choices[0].delta.role == "assistant"
        streamed_chat = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert chat.choices[0].message.content == streamed_chat
        assert chat.usage.prompt_tokens == len(b"user: hello\nassistant:")


def _client_leaves(url, key, pipeline, nodes, workers):
    """A streaming client that hangs up: its generation is cancelled, KV slots freed on both
    nodes. It leaves right after the first chunk (the role), before any token."""
    from inference.selectors import node_inspect

    payload = {
        "model": "e2e",
        "messages": [{"role": "user", "content": "go on"}],
        "max_tokens": 200,
        "temperature": 0,  # greedy: no early end-of-sequence by chance
        "stream": True,
    }
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=payload, headers=headers) as r:
        assert r.status_code == 200
        assert next(r.iter_lines()).startswith("data: ")
    generation = Generation.objects.filter(pipeline=pipeline).order_by("-created_at").first()
    assert generation is not None
    deadline = time.monotonic() + 20
    while (g := Generation.objects.get(pk=generation.pk)).state != "cancelled":
        done_at = g.finished_at
        if g.state == "finished" and done_at and (done_at - g.created_at).total_seconds() < 2:
            break  # the tiny model outran the hang-up (200 tokens in ~1 s): nothing to cancel
        events = [e["type"] for _, e in stream_of(g.pk)]
        assert time.monotonic() < deadline, (
            f"{g.state} {g.finish_reason} out={len(g.output_tokens)} created={g.created_at} "
            f"finished={g.finished_at} events={events} now={timezone.now()}"
        )
        time.sleep(0.1)
    while any((node_inspect(n.pk) or {}).get("slots_used") for n, _, _ in nodes):
        assert time.monotonic() < deadline, [node_inspect(n.pk) for n, _, _ in nodes]
        time.sleep(0.1)

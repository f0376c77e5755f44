"""The OpenAI features evaluation tools need, on the web side: logprobs and top_logprobs
(completions and chat, streamed and not), echo with prompt logprobs (max_tokens 0), n,
best_of, lists of prompts. A fake worker writes each generation's events (with the logprob
entries a verifier streams) into the real test Redis; tests/serving/test_openai_e2e_logprobs.py
runs the same through real workers."""

import pytest

from inference import wire
from inference.models import Generation, GenerationState
from tests.serving.conftest import script
from tests.serving.test_openai_api import assert_openai_error, post, sse_payloads

pytestmark = pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume")


def entry(token: int, lp: float, top: int) -> list:
    """A verifier's logprob entry: the token's logprob and `top` alternatives (byte ids)."""
    return [lp, [[token, lp], [0x7E, lp - 1.0], [0x7D, lp - 2.0]][:top]]


def lp_script(text: str, *, lp: float = -0.5, top: int = 2, chunk: int = 3, prompt=None):
    """Events for `text` (one token per byte) carrying logprobs; `prompt` ids: with prompt
    logprobs on the first event."""
    events = script(text, chunk=chunk)
    for e in events[:-1]:
        e["logprobs"] = [entry(t, lp, top) for t in e["tokens"]]
    if prompt is not None:
        events[0]["prompt_logprobs"] = [None] + [entry(t, -1.25, top) for t in prompt[1:]]
    return events


def test_completion_logprobs(serving, as_persona, fake_worker):
    fake_worker.events = lp_script("Hi!", lp=-0.5, top=2)
    payload = {"model": "demo", "prompt": "ab", "max_tokens": 3, "logprobs": 2}
    data = post(as_persona("operator"), "/v1/completions", payload).json()
    lp = data["choices"][0]["logprobs"]
    assert lp["tokens"] == ["H", "i", "!"]
    assert lp["token_logprobs"] == [-0.5, -0.5, -0.5]
    assert lp["top_logprobs"][0] == {"H": -0.5, "~": -1.5}
    assert lp["text_offset"] == [0, 1, 2]
    assert Generation.objects.get().params["logprobs"] == 2
    assert "prompt_logprobs" not in Generation.objects.get().params


def test_completion_logprobs_keep_the_sampled_token_among_the_top(serving, as_persona, fake_worker):
    fake_worker.events = lp_script("A", top=0)
    payload = {"model": "demo", "prompt": "ab", "max_tokens": 1, "logprobs": 0}
    lp = post(as_persona("operator"), "/v1/completions", payload).json()["choices"][0]["logprobs"]
    assert lp["top_logprobs"] == [{"A": -0.5}]


def test_no_logprobs_asked_none_computed(serving, as_persona, fake_worker):
    data = post(as_persona("operator"), "/v1/completions", {"model": "demo", "prompt": "a"}).json()
    assert data["choices"][0]["logprobs"] is None
    params = Generation.objects.get().params
    assert "logprobs" not in params and "prompt_logprobs" not in params


def test_loglikelihood_request_of_an_evaluation_harness(serving, as_persona, fake_worker):
    """lm-evaluation-harness' local-completions: a list of token-id prompts, echo, logprobs=1,
    max_tokens 0 -> per prompt token logprobs, the first null."""
    prompts = [[104, 101, 108], [119, 111]]

    def events(kwargs, k):
        ids = kwargs["prompt_tokens"]
        e = wire.done_event("length", len(ids), 0)
        e["prompt_logprobs"] = [None] + [entry(t, -1.0 - k, 1) for t in ids[1:]]
        return [e]

    fake_worker.events = events
    payload = {
        "model": "demo",
        "prompt": prompts,
        "echo": True,
        "logprobs": 1,
        "max_tokens": 0,
        "temperature": 0,
    }
    data = post(as_persona("operator"), "/v1/completions", payload).json()
    assert [c["index"] for c in data["choices"]] == [0, 1]
    first, second = data["choices"]
    assert first["text"] == "hel" and second["text"] == "wo"
    assert first["finish_reason"] == "length"
    assert first["logprobs"]["tokens"] == ["h", "e", "l"]
    assert first["logprobs"]["token_logprobs"] == [None, -1.0, -1.0]
    assert first["logprobs"]["top_logprobs"] == [None, {"e": -1.0}, {"l": -1.0}]
    assert first["logprobs"]["text_offset"] == [0, 1, 2]
    assert second["logprobs"]["token_logprobs"] == [None, -2.0]
    assert data["usage"] == {"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5}
    gens = Generation.objects.order_by("created_at")
    assert [g.prompt_tokens for g in gens] == prompts
    assert all(g.params["max_tokens"] == 0 and g.params["prompt_logprobs"] == 1 for g in gens)


def test_echo_with_a_completion_offsets_continue_after_the_prompt(serving, as_persona, fake_worker):
    fake_worker.events = lp_script("xy", top=0, prompt=[97, 98])
    payload = {"model": "demo", "prompt": "ab", "echo": True, "logprobs": 0, "max_tokens": 2}
    choice = post(as_persona("operator"), "/v1/completions", payload).json()["choices"][0]
    assert choice["text"] == "abxy"
    assert choice["logprobs"]["tokens"] == ["a", "b", "x", "y"]
    assert choice["logprobs"]["token_logprobs"] == [None, -1.25, -0.5, -0.5]
    assert choice["logprobs"]["text_offset"] == [0, 1, 2, 3]


def test_echo_without_logprobs_only_echoes(serving, as_persona, fake_worker):
    payload = {"model": "demo", "prompt": "ab", "echo": True, "max_tokens": 4}
    choice = post(as_persona("operator"), "/v1/completions", payload).json()["choices"][0]
    assert choice["text"] == "abHello, world!" and choice["logprobs"] is None


def test_chat_logprobs(serving, as_persona, fake_worker):
    fake_worker.events = lp_script("é!", top=2)  # é: two byte tokens
    payload = {
        "model": "demo",
        "messages": [{"role": "user", "content": "hi"}],
        "logprobs": True,
        "top_logprobs": 2,
    }
    data = post(as_persona("operator"), "/v1/chat/completions", payload).json()
    lp = data["choices"][0]["logprobs"]
    assert lp["refusal"] is None
    content = lp["content"]
    assert [c["logprob"] for c in content] == [-0.5] * 3
    assert b"".join(bytes(c["bytes"]) for c in content).decode() == "é!"
    assert content[2]["token"] == "!" and content[2]["bytes"] == [33]
    assert content[2]["top_logprobs"] == [
        {"token": "!", "logprob": -0.5, "bytes": [33]},
        {"token": "~", "logprob": -1.5, "bytes": [126]},
    ]
    assert Generation.objects.get().params["logprobs"] == 2


def test_chat_logprobs_without_top_and_none_unasked(serving, as_persona, fake_worker):
    fake_worker.events = lp_script("ok", top=0)
    base = {"model": "demo", "messages": [{"role": "user", "content": "hi"}]}
    data = post(as_persona("operator"), "/v1/chat/completions", base | {"logprobs": True}).json()
    assert [c["top_logprobs"] for c in data["choices"][0]["logprobs"]["content"]] == [[], []]
    data = post(as_persona("operator"), "/v1/chat/completions", base).json()
    assert data["choices"][0]["logprobs"] is None
    neutral = base | {"logprobs": False, "top_logprobs": 0}  # defaults some clients send
    data = post(as_persona("operator"), "/v1/chat/completions", neutral).json()
    assert data["choices"][0]["logprobs"] is None


def test_completion_stream_with_logprobs_and_echo(serving, as_persona, fake_worker):
    fake_worker.events = lp_script("Hello", top=1, chunk=2, prompt=[97, 98])
    payload = {
        "model": "demo",
        "prompt": "ab",
        "max_tokens": 5,
        "logprobs": 1,
        "echo": True,
        "stream": True,
    }
    chunks = sse_payloads(post(as_persona("operator"), "/v1/completions", payload))
    texts = [c["choices"][0]["text"] for c in chunks]
    assert texts == ["ab", "He", "ll", "o", ""]
    lps = [c["choices"][0]["logprobs"] for c in chunks]
    assert lps[0]["token_logprobs"] == [None, -1.25]
    assert lps[1]["tokens"] == ["H", "e"] and lps[1]["text_offset"] == [2, 3]
    assert lps[3]["text_offset"] == [6]
    assert lps[-1] is None and chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_chat_stream_with_logprobs(serving, as_persona, fake_worker):
    fake_worker.events = lp_script("Hey", top=1)
    payload = {
        "model": "demo",
        "messages": [{"role": "user", "content": "hi"}],
        "logprobs": True,
        "top_logprobs": 1,
        "stream": True,
    }
    chunks = sse_payloads(post(as_persona("operator"), "/v1/chat/completions", payload))
    with_lp = [c for c in chunks if c["choices"][0]["logprobs"]]
    assert len(with_lp) == 1
    content = with_lp[0]["choices"][0]["logprobs"]["content"]
    assert [c["token"] for c in content] == ["H", "e", "y"]
    assert content[0]["top_logprobs"] == [{"token": "H", "logprob": -0.5, "bytes": [72]}]


def test_n_samples_are_independent_seeded_generations(serving, as_persona, fake_worker):
    fake_worker.events = lambda kwargs, k: script(f"s{k}")
    payload = {"model": "demo", "prompt": "ab", "n": 3, "seed": 7, "temperature": 1.0}
    data = post(as_persona("operator"), "/v1/completions", payload).json()
    assert [(c["index"], c["text"]) for c in data["choices"]] == [(0, "s0"), (1, "s1"), (2, "s2")]
    assert data["usage"] == {"prompt_tokens": 2, "completion_tokens": 6, "total_tokens": 8}
    seeds = [g.params["seed"] for g in fake_worker.submitted]
    assert seeds[0] == 7 and len(set(seeds)) == 3
    assert data["id"] == f"cmpl-{fake_worker.submitted[0].id.hex}"
    again = post(as_persona("operator"), "/v1/completions", payload).json()
    assert [g.params["seed"] for g in fake_worker.submitted[3:]] == seeds  # reproducible
    assert len(again["choices"]) == 3


def test_a_list_of_prompts_with_n_is_indexed_prompt_by_prompt(serving, as_persona, fake_worker):
    fake_worker.events = lambda kwargs, k: script(f"{kwargs['prompt']}{k}")
    payload = {"model": "demo", "prompt": ["a", "b"], "n": 2, "max_tokens": 2}
    data = post(as_persona("operator"), "/v1/completions", payload).json()
    assert [(c["index"], c["text"]) for c in data["choices"]] == [
        (0, "a0"),
        (1, "a1"),
        (2, "b2"),
        (3, "b3"),
    ]
    assert data["usage"]["prompt_tokens"] == 2


def test_best_of_returns_the_most_likely_samples(serving, as_persona, fake_worker):
    likelihood = [-3.0, -0.25, -1.0, -2.0]
    fake_worker.events = lambda kwargs, k: lp_script(f"s{k}", lp=likelihood[k], top=0)
    payload = {"model": "demo", "prompt": "ab", "n": 2, "best_of": 4, "max_tokens": 2}
    data = post(as_persona("operator"), "/v1/completions", payload).json()
    assert [(c["index"], c["text"]) for c in data["choices"]] == [(0, "s1"), (1, "s2")]
    assert all(c["logprobs"] is None for c in data["choices"])  # computed, not asked
    assert data["usage"]["completion_tokens"] == 8  # all four samples ran
    assert [g.params["logprobs"] for g in fake_worker.submitted] == [0] * 4


def test_stream_with_n_interleaves_indexed_choices(serving, as_persona, fake_worker):
    fake_worker.events = lambda kwargs, k: script(f"abc{k}", chunk=2)
    payload = {
        "model": "demo",
        "messages": [{"role": "user", "content": "hi"}],
        "n": 2,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks = sse_payloads(post(as_persona("operator"), "/v1/chat/completions", payload))
    text = {0: "", 1: ""}
    finish = {}
    for c in chunks[:-1]:
        choice = c["choices"][0]
        text[choice["index"]] += choice["delta"].get("content", "")
        if choice["finish_reason"]:
            finish[choice["index"]] = choice["finish_reason"]
    assert text == {0: "abc0", 1: "abc1"} and finish == {0: "stop", 1: "stop"}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 8


def test_one_failed_sample_fails_the_request_and_cancels_the_rest(serving, as_persona, fake_worker):
    def events(kwargs, k):
        if k == 0:
            return [wire.error_event("verifier lost")]
        return [wire.tokens_event([65], "A", 1)]  # then nothing: still running

    fake_worker.events = events
    payload = {"model": "demo", "prompt": "ab", "n": 3}
    error = assert_openai_error(post(as_persona("operator"), "/v1/completions", payload), 502)
    assert "verifier lost" in error["message"]
    states = [Generation.objects.get(pk=g.pk).state for g in fake_worker.submitted]
    assert states[1:] == [GenerationState.CANCELLED] * 2

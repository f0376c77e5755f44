"""Per-request speculative-decoding figures in /v1 answers (`"return_spec_metrics": true`):
vLLM's `metrics.speculative_decoding`, from the verifier's counters on each done event."""

import pytest

from inference import wire
from inference.serving.openai_spec import speculative_decoding
from tests.serving.conftest import script
from tests.serving.test_openai_api import GOOD, assert_openai_error, post, sse_payloads

pytestmark = pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume")


class Counters:  # what the verifier's SpecCounters hold for one generation
    def __init__(self, drafts, draft_tokens, accepted, per_pos, draft_per_pos):
        self.num_drafts, self.num_draft_tokens, self.num_accepted_tokens = (
            drafts,
            draft_tokens,
            accepted,
        )
        self.num_accepted_tokens_per_pos = per_pos
        self.num_draft_tokens_per_pos = draft_per_pos


# 5 rounds of k=4 (20 draft tokens) and one of k=2: accepted 0,1,2,4,4 and 1 -> 12
A = Counters(6, 22, 12, [5, 3, 2, 2], [6, 6, 5, 5])
B = Counters(2, 8, 1, [1], [2, 2, 2, 2])


def with_spec(text: str, counters, *, prompt_tokens: int = 6) -> list:
    events = script(text, prompt_tokens=prompt_tokens)
    done = events[-1]
    events[-1] = wire.done_event(
        done["finish_reason"],
        done["usage"]["prompt_tokens"],
        done["usage"]["completion_tokens"],
        spec=counters,
    )
    return events


def test_the_figures_of_one_generation():
    spec = wire.done_event("stop", 1, 2, spec=A)["spec"]
    got = speculative_decoding([spec])
    assert got is not None
    assert got == {
        "num_drafts": 6,
        "num_draft_tokens": 22,
        "num_accepted_tokens": 12,
        "num_accepted_tokens_per_pos": [5, 3, 2, 2],
        "num_draft_tokens_per_pos": [6, 6, 5, 5],
        "num_spec_steps": 6,
        "num_accepted_draft_tokens": 12,
        "num_spec_tokens": 4,
        "draft_acceptance_rate": 12 / 22,
        "mean_acceptance_length": 1 + 12 / 6,
        "acceptance_histogram": [1, 2, 1, 0, 2],  # rounds accepting exactly 0..4
    }
    assert sum(got["acceptance_histogram"]) == got["num_drafts"]
    assert sum(j * n for j, n in enumerate(got["acceptance_histogram"])) == 12
    assert speculative_decoding([None]) is None
    plain = wire.done_event("stop", 1, 2, spec=Counters(0, 0, 0, [], []))["spec"]
    got = speculative_decoding([plain])  # plain decoding: no drafts, nothing accepted
    assert got is not None
    assert got["num_drafts"] == 0 and got["draft_acceptance_rate"] is None
    assert got["mean_acceptance_length"] == 1.0 and got["acceptance_histogram"] == [0]


def test_body_has_metrics_only_when_asked(serving, as_persona, fake_worker):
    fake_worker.events = with_spec("Hello, world!", A)
    client = as_persona("operator")
    plain = post(client, "/v1/completions", GOOD).json()
    assert "metrics" not in plain
    body = post(client, "/v1/completions", GOOD | {"return_spec_metrics": True}).json()
    spec = body["metrics"]["speculative_decoding"]
    assert spec["num_drafts"] == 6 and spec["num_accepted_tokens_per_pos"] == [5, 3, 2, 2]
    assert body["choices"][0]["text"] == "Hello, world!"


def test_samples_and_prompts_are_summed(serving, as_persona, fake_worker):
    fake_worker.events = lambda kwargs, k: with_spec("Hi", A if k == 0 else B)
    body = post(
        as_persona("operator"),
        "/v1/chat/completions",
        {
            "model": "demo",
            "messages": [{"role": "user", "content": "hi"}],
            "n": 2,
            "return_spec_metrics": True,
        },
    ).json()
    spec = body["metrics"]["speculative_decoding"]
    assert spec["num_drafts"] == 8 and spec["num_draft_tokens"] == 30
    assert spec["num_accepted_tokens"] == 13
    assert spec["num_accepted_tokens_per_pos"] == [6, 3, 2, 2]
    assert spec["acceptance_histogram"] == [2, 3, 1, 0, 2]


@pytest.mark.parametrize("usage", [False, True])
def test_stream_carries_them_on_its_final_chunk(serving, as_persona, fake_worker, usage):
    fake_worker.events = with_spec("Hello, world!", A)
    payload = GOOD | {"stream": True, "return_spec_metrics": True}
    if usage:
        payload["stream_options"] = {"include_usage": True}
    chunks = sse_payloads(post(as_persona("operator"), "/v1/completions", payload))
    assert [("metrics" in c) for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert chunks[-1]["metrics"]["speculative_decoding"]["num_accepted_tokens"] == 12
    if usage:
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 13
    else:
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    plain = sse_payloads(post(as_persona("operator"), "/v1/completions", GOOD | {"stream": True}))
    assert not any("metrics" in c for c in plain)


def test_a_bad_flag_is_a_400(serving, as_persona):
    response = post(as_persona("operator"), "/v1/completions", GOOD | {"return_spec_metrics": 1})
    assert_openai_error(response, 400, param="return_spec_metrics")

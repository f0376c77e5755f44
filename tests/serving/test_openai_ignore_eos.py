"""`ignore_eos`, vLLM's extension of the OpenAI body (`vllm bench serve` sends it): the
generation runs to max_tokens whatever the model's end of sequence says. Without it a
benchmark's requests end after a few tokens (SmolLM2 answered bench_control's prose prompts
in ~7 tokens), and a throughput figure measures request overheads instead of decoding."""

from __future__ import annotations

import pytest

from tests.serving.conftest import script
from tests.serving.test_openai_api import assert_openai_error, post

pytestmark = pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume")


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_ignore_eos_reaches_the_generation(serving, as_persona, fake_worker, path):
    fake_worker.events = lambda kwargs, k: script("ab")
    body = {"model": "demo", "max_tokens": 4, "ignore_eos": True}
    body |= (
        {"prompt": "x"} if "chat" not in path else {"messages": [{"role": "user", "content": "x"}]}
    )
    assert post(as_persona("operator"), path, body).status_code == 200
    assert fake_worker.submitted[-1].params["ignore_eos"] is True
    body["ignore_eos"] = False
    assert post(as_persona("operator"), path, body).status_code == 200
    assert "ignore_eos" not in fake_worker.submitted[-1].params  # the default stores nothing


def test_ignore_eos_must_be_a_boolean(serving, as_persona, fake_worker):
    body = {"model": "demo", "prompt": "x", "ignore_eos": "yes"}
    r = post(as_persona("operator"), "/v1/completions", body)
    assert_openai_error(r, 400, param="ignore_eos")
    assert not fake_worker.submitted

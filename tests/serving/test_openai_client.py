"""The official `openai` client, unchanged, against a live ASGI server (uvicorn in a thread,
this process's test database and Redis). Workers are faked: a thread writes each
generation's events to its real Redis stream after the real `generation_submit`. The
end-to-end run with real worker processes is test_serving_e2e.py."""

import threading
import time

import httpx
import openai
import pytest

from fleet.accounts.services import api_key_create
from fleet.testing.ports import free_port
from inference.models import Generation, GenerationState
from tests.serving.conftest import script

# Live server: data must be committed; keep the seeded rows for the tests that follow.
pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


@pytest.fixture
def asgi_server(transactional_db):
    import uvicorn

    from fleet.asgi import application

    port = free_port()
    config = uvicorn.Config(
        application, host="127.0.0.1", port=port, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def key(operator):
    return api_key_create(user=operator, name="openai-client")[1]


@pytest.fixture
def client(asgi_server, key):
    return openai.OpenAI(base_url=f"{asgi_server}/v1", api_key=key, max_retries=0, timeout=30)


@pytest.fixture
def worker(fake_worker):
    fake_worker.delay_s = 0.01  # events arrive while the client is reading
    return fake_worker


def test_models_list_and_retrieve(serving, client):
    assert [m.id for m in client.models.list()] == ["demo"]
    assert client.models.retrieve("demo").id == "demo"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope")


def test_completion(serving, client, worker):
    result = client.completions.create(model="demo", prompt="def f(", max_tokens=13, temperature=0)
    assert result.choices[0].text == "Hello, world!"
    assert result.choices[0].finish_reason == "stop"
    assert result.usage.prompt_tokens == 6 and result.usage.completion_tokens == 13


def test_completion_stream(serving, client, worker):
    stream = client.completions.create(
        model="demo",
        prompt="def f(",
        max_tokens=13,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "Hello, world!"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens == 13


def test_chat(serving, client, worker):
    result = client.chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "hi"}], max_tokens=20, seed=1
    )
    assert result.choices[0].message.role == "assistant"
    assert result.choices[0].message.content == "Hello, world!"
    assert result.usage.total_tokens == result.usage.prompt_tokens + 13


def test_chat_stream(serving, client, worker):
    stream = client.chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "hi"}], max_tokens=20, stream=True
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Hello, world!"
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_errors_raise_the_clients_exceptions(serving, asgi_server, client):
    bad = openai.OpenAI(base_url=f"{asgi_server}/v1", api_key="tdm_00000000_x", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="demo", prompt="x" * 64, max_tokens=1)
    assert caught.value.code == "context_length_exceeded"
    tool = {"type": "function", "function": {"name": "f", "parameters": {}}}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="demo", messages=[{"role": "user", "content": "x"}], tools=[tool]
        )
    assert caught.value.param == "tools"
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="demo", messages=[{"role": "user", "content": "x"}], n=17
        )
    assert caught.value.param == "n"
    with pytest.raises(openai.NotFoundError) as not_found:
        client.completions.create(model="nope", prompt="x")
    assert not_found.value.code == "model_not_found"


def test_a_client_that_leaves_mid_stream_cancels_its_generation(serving, asgi_server, key, worker):
    worker.events = script("x" * 60, chunk=1)
    worker.delay_s = 0.05
    payload = {"model": "demo", "prompt": "a", "max_tokens": 60, "stream": True}
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.stream("POST", f"{asgi_server}/v1/completions", json=payload, headers=headers) as r:
        assert r.status_code == 200
        next(r.iter_lines())  # one chunk, then hang up
    generation = worker.submitted[0]
    deadline = time.monotonic() + 10
    while Generation.objects.get(pk=generation.pk).state != GenerationState.CANCELLED:
        assert time.monotonic() < deadline, "the generation was not cancelled"
        time.sleep(0.1)

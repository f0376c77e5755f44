"""The OpenAI endpoints under daphne, the production ASGI server (a subprocess on the test
database and Redis): a client that hangs up mid-stream gets its generation cancelled,
whether the stream is silent or busy. No workers: this test writes the events."""

import threading
import time

import httpx
import pytest

from fleet.accounts.services import api_key_create
from inference import wire
from inference.models import Generation
from inference.selectors import stream_owner

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def busy_writer(stop: threading.Event):
    """Writes a token event every 20 ms to the stream of the generation, once it exists."""
    n = 0
    while not stop.is_set():
        generation = Generation.objects.first()
        if generation is not None:
            n += 1
            wire.publish(
                generation.id, wire.tokens_event([97], "a", n), node=stream_owner(generation.id)
            )
        time.sleep(0.02)


@pytest.mark.parametrize("busy", [False, True], ids=["silent", "busy"])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_a_client_leaving_a_stream_cancels_its_generation(
    daphne_url, serving, operator, path, busy
):
    key = api_key_create(user=operator, name="daphne")[1]
    payload = {"model": "demo", "max_tokens": 8, "stream": True, "prompt": "x"}
    payload["messages"] = [{"role": "user", "content": "x"}]
    headers = {"Authorization": f"Bearer {key}"}
    stop = threading.Event()
    writer = threading.Thread(target=busy_writer, args=(stop,), daemon=True)
    if busy:
        writer.start()
    try:
        with httpx.stream("POST", daphne_url + path, json=payload, headers=headers) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            first = next(lines)
            assert first.startswith("data: ") if "chat" in path else first == ": started"
            if busy:  # read a few chunks while tokens flow, then hang up
                for _ in range(4):
                    next(lines)
        deadline = time.monotonic() + 20
        while (g := Generation.objects.get()).state != "cancelled":
            assert time.monotonic() < deadline, f"still {g.state}:\n{daphne_url.log()}"
            time.sleep(0.05)
    finally:
        stop.set()
        if busy:
            writer.join(5)

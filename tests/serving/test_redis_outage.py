"""A request that cannot reach the nodes because Redis is down is a 503 in the API's own
format, and leaves no `queued` row behind for a start message that never left."""

import json

import pytest

from inference.models import Generation, GenerationState
from tests.foundation.helpers import free_port

DEAD = "redis://127.0.0.1:{port}/0"


@pytest.fixture
def redis_down(settings, transactional_db):
    """After the test's setup: every Redis client of this process points at a dead port.
    transactional_db: the after-commit sends really run (and fail)."""
    return lambda: setattr(settings, "REDIS_URL", DEAD.format(port=free_port()))


def _assert_failed_not_queued(count: int) -> None:
    rows = list(Generation.objects.all())
    assert len(rows) == count, rows
    assert not [g for g in rows if g.state == GenerationState.QUEUED]
    assert all(g.state == GenerationState.FAILED for g in rows), [g.state for g in rows]
    assert all("unreachable" in g.error for g in rows), [g.error for g in rows]


@pytest.mark.parametrize("n", [1, 3])
def test_openai_completion_while_redis_is_down_is_503_and_leaves_no_queued_row(
    serving, as_persona, redis_down, n
):
    client = as_persona("operator")
    redis_down()
    body = {"model": "demo", "prompt": "def f(", "max_tokens": 4, "n": n}
    response = client.post("/v1/completions", json.dumps(body), content_type="application/json")
    assert response.status_code == 503, response.content
    assert response.json()["error"]["type"] == "server_error"
    _assert_failed_not_queued(n)


def test_rest_generation_while_redis_is_down_is_503_in_the_rest_format(
    serving, as_persona, redis_down
):
    client = as_persona("operator")
    redis_down()
    body = {"pipeline": "demo", "prompt": "def f(", "max_tokens": 8}
    response = client.post("/api/v1/generations", body, format="json")
    assert response.status_code == 503, response.content
    assert response.json() == {
        "detail": "The message queue is unreachable for a moment; please retry."
    }
    assert response["Retry-After"] == "2"
    _assert_failed_not_queued(1)

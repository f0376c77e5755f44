"""A generation stream refuses a malformed resume id at once (400), and a stream that fails
after its headers were sent ends with an error event instead of a silent cut."""

import json

import pytest

from fleet import redis_clients
from inference import wire
from inference.selectors import stream_owner

pytestmark = pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume")


def url(world) -> str:
    return f"/api/v1/generations/{world['generation'].id}/stream"


@pytest.mark.parametrize(
    "last_id",
    ["abc", "1-2-3", "-1", "1-", "0x10", "99999999999999999999999", f"{2**64}-0", "1-" + "9" * 21],
)
def test_a_malformed_last_event_id_is_400_at_once(world, as_persona, last_id):
    response = as_persona("admin").get(url(world), HTTP_LAST_EVENT_ID=last_id)
    assert response.status_code == 400 and response["Content-Type"] == "application/json"
    assert "Last-Event-ID" in response.json()


def test_a_valid_last_event_id_resumes_after_it(world, as_persona):
    gid = world["generation"].id
    first = wire.publish(gid, wire.tokens_event([104], "h", 1), node=stream_owner(gid))
    wire.publish(gid, wire.tokens_event([105], "i", 2), node=stream_owner(gid))
    wire.publish(gid, wire.done_event("stop", 2, 2), node=stream_owner(gid))
    response = as_persona("admin").get(url(world), HTTP_LAST_EVENT_ID=first)
    raw = b"".join(response).decode()
    compact = raw.replace(" ", "")  # however the events are laid out
    assert '"text":"h"' not in compact and '"text":"i"' in compact and "event: done" in raw


def test_a_stream_that_fails_after_its_headers_ends_with_an_error_event(world, as_persona):
    # A key of the wrong type: Redis refuses the XREAD once the response has started.
    g = world["generation"]
    redis_clients.client().set(wire.stream_key(g.verifier_id, g.id), "not a stream")
    response = as_persona("admin").get(url(world))
    assert response.status_code == 200
    blocks = [b for b in b"".join(response).decode().split("\n\n") if b]
    assert blocks[-1].splitlines()[0] == "event: error"
    assert json.loads(blocks[-1].splitlines()[1][6:])["type"] == "error"


@pytest.mark.timeout(20)  # before: held 120 s
@pytest.mark.parametrize("where", ["at_the_end", "past_the_end"])
def test_a_last_event_id_at_or_past_the_end_of_a_finished_stream_ends_at_once(
    world, as_persona, where
):
    """Before: the follower waited for events after it, 120 s, for a stream that was over."""
    import time

    gid = world["generation"].id
    wire.publish(gid, wire.tokens_event([104], "h", 1), node=stream_owner(gid))
    done = wire.publish(gid, wire.done_event("stop", 2, 1), node=stream_owner(gid))
    ms, seq = (int(x) for x in done.split("-"))
    last_id = done if where == "at_the_end" else f"{ms + 5000}-{seq}"
    started = time.monotonic()
    response = as_persona("admin").get(url(world), HTTP_LAST_EVENT_ID=last_id)
    assert response.status_code == 200
    assert b"".join(response) == b""
    assert time.monotonic() - started < 5

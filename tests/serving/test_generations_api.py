"""REST API for generations: create, validate, follow, list, cancel, stream."""

import pytest

from inference import wire
from inference.models import Generation, GenerationState
from inference.selectors import stream_owner
from inference.serving.request_rules import RequestError, sampling_params
from tests.serving.conftest import CONTEXT, script

URL = "/api/v1/generations"


def body(**overrides):
    return {"pipeline": "demo", "prompt": "def f(", "max_tokens": 8} | overrides


def test_operator_creates_a_generation(serving, as_persona, operator):
    response = as_persona("operator").post(
        URL, body(temperature=0, top_k=5, top_p=0.9, seed=7, stop="\n"), format="json"
    )
    assert response.status_code == 201, response.json()
    data = response.json()
    generation = Generation.objects.get(pk=data["id"])
    assert generation.user == operator and generation.prompt_tokens == list(b"def f(")
    assert generation.params == {
        "temperature": 0.0,
        "top_p": 0.9,
        "top_k": 5,
        "seed": 7,
        "stop": ["\n"],
        "max_tokens": 8,
    }
    assert data["state"] == "queued" and data["pipeline"] == "demo"
    assert data["drafter"] == "api-draft" and data["verifier"] == "api-verify"
    assert data["links"]["self"].endswith(f"{URL}/{data['id']}")
    assert data["links"]["stream"].endswith(f"{URL}/{data['id']}/stream")
    assert response["Location"] == data["links"]["self"]


def test_ignore_eos_reaches_the_generation_through_the_rest_api(serving, as_persona):
    """bench_control's smollm2 runs sent ignore_eos to this API, which dropped it: half their
    requests ended after one token."""
    client = as_persona("operator")
    created = client.post(URL, body(ignore_eos=True), format="json")
    assert created.status_code == 201, created.json()
    assert Generation.objects.get(pk=created.json()["id"]).params["ignore_eos"] is True
    plain = client.post(URL, body(ignore_eos=False), format="json").json()
    assert "ignore_eos" not in Generation.objects.get(pk=plain["id"]).params
    refused = client.post(URL, body(ignore_eos="yes"), format="json")
    assert refused.status_code == 400 and "ignore_eos" in refused.json()


def test_an_unknown_field_is_refused_not_dropped(serving, as_persona):
    response = as_persona("operator").post(URL, body(best_of=3, n=2), format="json")
    assert response.status_code == 400
    assert response.json()["best_of"] == ["Unknown field."] and "n" in response.json()
    assert not Generation.objects.exists()


@pytest.mark.parametrize("persona", ["operator", "admin"])
def test_the_created_body_is_the_serializers_body_of_the_row(serving, as_persona, persona):
    """POST answers a body built without DRF's model serializer (the hot path): it must be
    exactly what GenerationSerializer gives for the same row, as GET would show it then."""
    from rest_framework.test import APIRequestFactory

    from inference.serving.api import GenerationSerializer

    client = as_persona(persona)
    response = client.post(URL, body(stop=["\n", "END"], seed=3), format="json")
    assert response.status_code == 201, response.json()
    generation = Generation.objects.select_related("pipeline", "user", "drafter", "verifier").get(
        pk=response.json()["id"]
    )
    request = APIRequestFactory().get(URL)
    request.user = generation.user  # type: ignore[assignment]
    expected = GenerationSerializer(generation, context={"request": request}).data
    assert response.json() == expected


def test_text_with_nul_bytes_is_stored_on_every_database(serving, operator):
    # The OpenAI endpoints pass prompts through unchanged, and a byte-level model may
    # generate NUL: PostgreSQL refuses it in text columns, so the service replaces it.
    from inference.report_services import generation_finish
    from inference.services import generation_submit

    generation = generation_submit(
        pipeline=serving, prompt="a\x00b", prompt_tokens=[97, 0, 98], params={}, user=operator
    )
    generation.refresh_from_db()
    assert generation.prompt == "a\ufffdb" and generation.prompt_tokens == [97, 0, 98]
    Generation.objects.filter(pk=generation.pk).update(state=GenerationState.RUNNING)
    assert generation_finish(
        node_id=generation.verifier_id or 0,
        generation_id=generation.pk,
        attempt=generation.attempts,
        finish_reason="length",
        output_tokens=[0],
        output_text="\x00",
        counters={},
        itl_ms={},
    )
    generation.refresh_from_db()
    assert generation.output_text == "\ufffd" and generation.output_tokens == [0]


def test_max_tokens_defaults_to_the_rest_of_the_context(serving, as_persona):
    response = as_persona("admin").post(URL, {"pipeline": "demo", "prompt": "abcd"}, format="json")
    assert response.status_code == 201
    assert response.json()["params"]["max_tokens"] == CONTEXT - 4


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"pipeline": "nope"}, "pipeline"),
        ({"prompt": ""}, "prompt"),
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"seed": -3}, "seed"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stop": 5}, "stop"),
        ({"stop": "a\x00b"}, "stop"),  # PostgreSQL could not store it: refused up front
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": CONTEXT}, "max_tokens"),  # prompt + max_tokens over the context
        ({"prompt": "x" * CONTEXT}, "prompt"),  # the prompt alone fills the context
    ],
)
def test_bad_input_is_400_with_field_errors(serving, as_persona, overrides, field):
    response = as_persona("operator").post(URL, body(**overrides), format="json")
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert not Generation.objects.exists()


@pytest.mark.parametrize(
    ("overrides", "field", "param"),
    [
        ({"temperature": 2.5}, "temperature", {"temperature": 2.5}),
        ({"top_p": 0}, "top_p", {"top_p": 0}),
        ({"seed": -3}, "seed", {"seed": -3}),
        ({"stop": ["a"] * 5}, "stop", {"stop": ["a"] * 5}),
    ],
)
def test_the_rest_api_says_what_the_request_rules_say(serving, as_persona, overrides, field, param):
    """One source for the rules: the REST API's field error is request_rules' own message,
    the one /v1 gives too."""
    with pytest.raises(RequestError) as rule:
        sampling_params(**param)
    response = as_persona("operator").post(URL, body(**overrides), format="json")
    assert response.json()[field] == [rule.value.message]


def test_a_pipeline_without_healthy_nodes_is_503(pipeline, as_persona):
    response = as_persona("operator").post(URL, body(), format="json")
    assert response.status_code == 503
    assert "no healthy" in response.json()["detail"]


@pytest.mark.parametrize(
    ("persona", "status"), [("anonymous", 401), ("outsider", 403), ("viewer", 403)]
)
def test_who_may_not_create(serving, as_persona, persona, status):
    assert as_persona(persona).post(URL, body(), format="json").status_code == status


def test_unknown_generation_is_404(db, as_persona):
    client = as_persona("viewer")
    missing = "00000000-0000-0000-0000-000000000000"
    assert client.get(f"{URL}/{missing}").status_code == 404
    assert client.get(f"{URL}/not-a-uuid").status_code == 404
    assert as_persona("operator").delete(f"{URL}/{missing}").status_code == 404


def test_detail_shows_output_so_far_from_the_stream(serving, as_persona):
    created = as_persona("operator").post(URL, body(), format="json").json()
    for event in script("Hello, world!")[:2]:  # two token events, no done yet
        wire.publish(created["id"], event, node=stream_owner(created["id"]))
    Generation.objects.filter(pk=created["id"]).update(state=GenerationState.RUNNING)
    data = as_persona("operator").get(f"{URL}/{created['id']}").json()  # its owner
    assert data["state"] == "running"
    assert data["output_text"] == "Hello,"
    assert data["output_token_count"] == 6
    assert set(data["timings"]) == {
        "queue_ms",
        "ttft_ms",
        "itl_p50_ms",
        "itl_p99_ms",
        "itl_mean_ms",
        "total_ms",
    }


def test_list_filters_and_paginates(serving, as_persona, django_assert_max_num_queries):
    client = as_persona("operator")
    ids = [client.post(URL, body(), format="json").json()["id"] for _ in range(3)]
    Generation.objects.filter(pk=ids[0]).update(state=GenerationState.FINISHED)
    viewer = as_persona("viewer")
    page = viewer.get(URL, {"limit": 2}).json()
    assert page["count"] == 3 and len(page["results"]) == 2 and page["next"]
    assert [g["id"] for g in viewer.get(URL, {"state": "finished"}).json()["results"]] == [ids[0]]
    assert viewer.get(URL, {"pipeline": "other"}).json()["count"] == 0
    assert viewer.get(URL, {"state": "bogus"}).status_code == 400
    with django_assert_max_num_queries(6):  # constant: no query per row
        assert viewer.get(URL).status_code == 200


def test_cancel_by_owner_then_idempotent(serving, as_persona):
    client = as_persona("operator")
    gid = client.post(URL, body(), format="json").json()["id"]
    response = client.delete(f"{URL}/{gid}")
    assert response.status_code == 202
    assert response.json()["state"] == "cancelled"
    again = client.delete(f"{URL}/{gid}")
    assert again.status_code == 200 and again.json()["state"] == "cancelled"


def test_cancel_permissions(serving, as_persona):
    gid = as_persona("admin").post(URL, body(), format="json").json()["id"]
    assert as_persona("viewer").delete(f"{URL}/{gid}").status_code == 403
    assert as_persona("outsider").delete(f"{URL}/{gid}").status_code == 403
    assert as_persona("anonymous").delete(f"{URL}/{gid}").status_code == 401
    # Another user's generation: an operator may not cancel it; the owner or an admin may.
    assert as_persona("operator").delete(f"{URL}/{gid}").status_code == 403
    assert as_persona("admin").delete(f"{URL}/{gid}").status_code == 202
    assert Generation.objects.get(pk=gid).state == GenerationState.CANCELLED


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume")
def test_stream_sends_the_events_as_sse(serving, as_persona):
    gid = as_persona("operator").post(URL, body(), format="json").json()["id"]
    for event in script("Hi there", chunk=4):
        wire.publish(gid, event, node=stream_owner(gid))
    response = as_persona("operator").get(f"{URL}/{gid}/stream")  # its owner
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    raw = b"".join(response).decode()
    blocks = [b for b in raw.split("\n\n") if b]
    assert [b.splitlines()[1] for b in blocks] == ["event: tokens", "event: tokens", "event: done"]
    assert blocks[0].splitlines()[0].startswith("id: ")
    assert '"text":"Hi t"' in blocks[0]


def test_stream_needs_auth_and_an_existing_generation(serving, as_persona):
    gid = as_persona("operator").post(URL, body(), format="json").json()["id"]
    assert as_persona("anonymous").get(f"{URL}/{gid}/stream").status_code == 401
    assert as_persona("outsider").get(f"{URL}/{gid}/stream").status_code == 403
    missing = "00000000-0000-0000-0000-000000000000"
    assert as_persona("viewer").get(f"{URL}/{missing}/stream").status_code == 404

"""vLLM's tokenizer endpoints (/tokenize, /detokenize, /tokenizer_info): vLLM's shapes, /v1's
keys, roles and OpenAI error objects, the web process's own tokenizer."""

import json

import pytest

from fleet.pipelines.models import Pipeline
from inference.serving import tokenization
from tests.conftest import client_for
from tests.serving.conftest import CONTEXT, write_model_dir
from tests.serving.test_openai_api import assert_openai_error, post
from tests.serving.test_tokenization import SMOLLM2_TEMPLATE, _with_template


@pytest.fixture
def chat_pipeline(db, tmp_path):
    path = _with_template(write_model_dir(tmp_path / "smol", chatml=True), SMOLLM2_TEMPLATE)
    config = json.loads((path / "tokenizer_config.json").read_text())
    config |= {"tokenizer_class": "GPT2Tokenizer", "eos_token": "<|im_end|>"}
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return Pipeline.objects.create(name="smol", target_model=str(path), draft_model="x")


def test_tokenize_a_prompt(serving, operator, model_path):
    client = client_for(operator)
    tok = tokenization.load(str(model_path))
    r = post(client, "/tokenize", {"model": "demo", "prompt": "Hi!"})
    assert r.status_code == 200, r.content
    body = r.json()
    assert body == {
        "count": 3,
        "max_model_len": CONTEXT,
        "tokens": tok.encode("Hi!"),
        "token_strs": None,
    }
    r = post(client, "/tokenize", {"prompt": "Hi!", "return_token_strs": True})  # one model
    assert r.status_code == 200
    assert r.json()["tokens"] == body["tokens"]
    assert r.json()["token_strs"] == [tok.tk.id_to_token(i) for i in body["tokens"]]


def test_tokenize_messages_renders_the_chat_template(chat_pipeline, operator):
    client = client_for(operator)
    tok = tokenization.load(chat_pipeline.target_model)
    messages = [{"role": "user", "content": "What is 2 + 2?"}]
    r = post(client, "/tokenize", {"model": "smol", "messages": messages})
    assert r.status_code == 200, r.content
    ids = r.json()["tokens"]
    assert ids == tok.encode(tok.chat_prompt(messages))  # what /v1/chat/completions sends
    assert ids[-3:] == tok.encode("assistant\n")[-3:]
    r = post(
        client,
        "/tokenize",
        {"model": "smol", "messages": messages, "add_generation_prompt": False},
    )
    opened = tok.decode(ids)
    closed = tok.tk.decode(r.json()["tokens"], skip_special_tokens=True)
    assert opened.startswith(closed) and len(closed) < len(opened)
    assert not tok.tk.decode(r.json()["tokens"], skip_special_tokens=False).endswith("assistant\n")


def test_detokenize_round_trips(serving, operator):
    client = client_for(operator)
    ids = post(client, "/tokenize", {"model": "demo", "prompt": "héllo"}).json()["tokens"]
    r = post(client, "/detokenize", {"model": "demo", "tokens": ids})
    assert r.status_code == 200
    assert r.json() == {"prompt": "héllo"}


def test_tokenizer_info(chat_pipeline, operator):
    client = client_for(operator)
    r = client.get("/tokenizer_info?model=smol")
    assert r.status_code == 200, r.content
    info = r.json()
    assert info["tokenizer_class"] == "GPT2Tokenizer"
    assert info["eos_token"] == "<|im_end|>"
    assert info["chat_template"] == SMOLLM2_TEMPLATE
    assert info["model_max_length"] == CONTEXT
    tok = tokenization.load(chat_pipeline.target_model)
    assert info["vocab_size"] == tok.tk.get_vocab_size(with_added_tokens=True)
    assert client.get("/tokenizer_info").status_code == 200  # the only model


@pytest.mark.parametrize(
    "path,payload,param",
    [
        ("/tokenize", {"model": "demo"}, "prompt"),
        ("/tokenize", {"model": "demo", "prompt": "x", "messages": []}, "prompt"),
        ("/tokenize", {"model": "demo", "prompt": ["x"]}, "prompt"),
        ("/tokenize", {"model": "demo", "messages": "hi"}, "messages"),
        ("/tokenize", {"model": "demo", "prompt": "x", "add_special_tokens": "yes"}, None),
        (
            "/tokenize",
            {"model": "demo", "messages": [{"role": "user", "content": "x"}], "chat_template": "t"},
            "chat_template",
        ),
        ("/tokenize", {"model": 3, "prompt": "x"}, "model"),
        ("/detokenize", {"model": "demo", "tokens": [1, 99999]}, "tokens"),
        ("/detokenize", {"model": "demo", "tokens": [1, True]}, "tokens"),
        ("/detokenize", {"model": "demo", "tokens": "1 2"}, "tokens"),
        ("/detokenize", {"model": "demo"}, "tokens"),
    ],
)
def test_bad_input_is_a_400_openai_error(serving, operator, path, payload, param):
    assert_openai_error(post(client_for(operator), path, payload), 400, param=param)


def test_errors_are_openai_objects(serving, operator, viewer, api, pipeline):
    client = client_for(operator)
    assert_openai_error(post(client, "/tokenize", {"model": "nope", "prompt": "x"}), 404)
    assert_openai_error(client.get("/tokenize"), 405)
    assert_openai_error(post(client, "/tokenizer_info", {}), 405)
    r = client.post("/tokenize", b"{not json", content_type="application/json")
    assert_openai_error(r, 400)
    assert_openai_error(post(api, "/tokenize", {"prompt": "x"}), 401, code="missing_api_key")
    api.credentials(HTTP_AUTHORIZATION="Bearer tdm_deadbeef_nope")
    assert_openai_error(api.get("/tokenizer_info"), 401, code="invalid_api_key")
    viewer_client = client_for(viewer)  # may view, not generate: as /v1/completions
    assert_openai_error(post(viewer_client, "/detokenize", {"tokens": [1]}), 403)
    Pipeline.objects.create(name="other", target_model=pipeline.target_model, draft_model="x")
    r = post(client, "/tokenize", {"prompt": "x"})  # two models now: name one
    assert_openai_error(r, 400, param="model")
    assert post(client, "/tokenize", {"model": "other", "prompt": "x"}).status_code == 200


def test_a_missing_model_directory_is_a_400_not_a_500(db, operator, tmp_path):
    Pipeline.objects.create(name="gone", target_model=str(tmp_path / "nowhere"), draft_model="x")
    r = post(client_for(operator), "/tokenize", {"model": "gone", "prompt": "x"})
    assert r.status_code in (400, 503), r.content
    assert_openai_error(r, r.status_code)

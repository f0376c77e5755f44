"""A pipeline's models resolve only inside the models directory (DATA_DIR/models) or the
known model paths (TANDEM_MODEL_PATHS): no server path, no `..`, no symlink out, and the
refusal reads the same whether the path exists or not."""

import json

import pytest

from fleet.pipelines.model_refs import UnknownModel, resolve

OUTSIDE = [
    "/etc",
    "/etc/passwd",
    "/nonexistent-dir-xyz",
    "../..",
    "../../etc",
    "a/../../b",
    ".hidden",
    "models/../..",
    "~root",
    "a//b",
    "C:\\x",
    "a\x00b",
]


def _model(path):
    path.mkdir(parents=True, exist_ok=True)
    vocab = {"a": 0, "b": 1}
    tok = {"model": {"type": "BPE", "vocab": vocab}, "added_tokens": []}
    (path / "tokenizer.json").write_text(json.dumps(tok))
    return path


@pytest.fixture
def models(tmp_path, settings):
    settings.DATA_DIR = tmp_path / "data"
    settings.MODEL_PATHS = []
    _model(tmp_path / "data" / "models" / "llama-8b")
    _model(tmp_path / "data" / "models" / "org" / "draft-1b")
    return tmp_path


@pytest.mark.parametrize("ref", OUTSIDE)
def test_paths_outside_the_models_directory_are_refused(models, ref):
    with pytest.raises(UnknownModel):
        resolve(ref)


def test_names_inside_resolve(models):
    root = (models / "data" / "models").resolve()
    assert resolve("llama-8b") == root / "llama-8b"
    assert resolve("org/draft-1b") == root / "org" / "draft-1b"
    assert resolve("not-there-yet") == root / "not-there-yet"  # may live on the workers only


def test_a_symlink_out_of_the_models_directory_is_refused(models):
    (models / "data" / "models" / "sneaky").symlink_to("/etc")
    with pytest.raises(UnknownModel):
        resolve("sneaky")


def test_known_model_paths_are_allowed_exactly(models, settings):
    elsewhere = _model(models / "mnt" / "big-model")
    settings.MODEL_PATHS = [str(elsewhere)]
    assert resolve(str(elsewhere)) == elsewhere.resolve()
    with pytest.raises(UnknownModel):
        resolve(str(elsewhere.parent))


@pytest.mark.parametrize("field", ["target_model", "draft_model"])
def test_the_api_refuses_server_paths_without_saying_whether_they_exist(models, as_persona, field):
    client = as_persona("operator")
    messages = []
    for i, ref in enumerate(["/etc", "/no-such-dir-xyz", "../../etc", "../../no-such-xyz"]):
        body = {"name": f"p{i}", "target_model": "llama-8b", "draft_model": "org/draft-1b"}
        response = client.post("/api/v1/pipelines", {**body, field: ref}, format="json")
        assert response.status_code == 400, response.content
        messages.append(response.json()[field][0].replace(repr(ref), "REF"))
    assert len(set(messages)) == 1, messages  # existing and missing paths: the same answer
    ok = {"name": "fine", "target_model": "llama-8b", "draft_model": "org/draft-1b"}
    assert client.post("/api/v1/pipelines", ok, format="json").status_code == 201


def test_a_draft_swap_to_a_server_path_is_refused(models, pipeline, as_persona):
    client = as_persona("operator")
    response = client.post(
        f"/api/v1/pipelines/{pipeline.pk}/swap-draft", {"draft_model": "/etc"}, format="json"
    )
    assert response.status_code == 400, response.content
    assert "not a known model" in json.dumps(response.json())

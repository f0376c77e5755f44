"""Web-side tokenization: tokenizer.json + config.json only, cached, no torch."""

import json
import subprocess
import sys

import pytest

from inference.serving import tokenization
from tests.serving.conftest import write_model_dir


def test_byte_model_encodes_counts_context_and_uses_a_plain_transcript(tmp_path):
    tok = tokenization.load(str(write_model_dir(tmp_path / "m", context=128)))
    assert tok.context_length == 128
    assert tok.encode("héllo") == list("héllo".encode())
    assert tok.decode(tok.encode("héllo")) == "héllo"
    assert not tok.chatml
    prompt = tok.chat_prompt(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    )
    assert prompt == "system: Be brief.\nuser: hi\nassistant:"


def test_chatml_when_the_tokenizer_has_its_special_tokens(tmp_path):
    tok = tokenization.load(str(write_model_dir(tmp_path / "chat", chatml=True)))
    assert tok.chatml
    prompt = tok.chat_prompt([{"role": "user", "content": "hi"}])
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.encode(prompt)
    assert ids[0] == tok.tk.token_to_id("<|im_start|>")  # one id, not its bytes


def test_cached_per_path_and_relative_names_live_under_data_dir(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    write_model_dir(tmp_path / "models" / "tiny")
    first = tokenization.load("tiny")
    assert tokenization.load("tiny") is first
    assert first.path == tmp_path / "models" / "tiny"


def test_missing_or_broken_model_dir_is_a_clear_error(tmp_path):
    with pytest.raises(tokenization.TokenizerUnavailable, match="tokenizer.json"):
        tokenization.load(str(tmp_path / "nowhere"))
    broken = write_model_dir(tmp_path / "broken")
    (broken / "config.json").write_text("{}")
    with pytest.raises(tokenization.TokenizerUnavailable, match="max_position_embeddings"):
        tokenization.load(str(broken))


def test_web_modules_do_not_import_torch():
    code = (
        "import django, os, sys; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'fleet.settings');"
        "django.setup(); import fleet.urls, inference.serving.api, inference.serving.openai_api;"
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


# SmolLM2-Instruct's chat template (its tokenizer_config.json): a default system turn.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
MESSAGES = [{"role": "user", "content": "What is 2 + 2?"}]


def _with_template(path, template):
    config = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "chat_template": template}
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("model", ["smollm2-template", "byte-demo"])
def test_the_web_and_the_engine_turn_the_same_messages_into_the_same_ids(tmp_path, model):
    from inference.text.tokenizer import Tokenizer

    path = write_model_dir(tmp_path / model, chatml=model == "smollm2-template")
    if model == "smollm2-template":
        _with_template(path, SMOLLM2_TEMPLATE)
    web, engine = tokenization.load(str(path)), Tokenizer.from_dir(path)
    assert web.encode(web.chat_prompt(MESSAGES)) == engine.encode(engine.chat_prompt(MESSAGES))


def test_smollm2s_template_adds_its_default_system_turn(tmp_path):
    path = _with_template(write_model_dir(tmp_path / "smol", chatml=True), SMOLLM2_TEMPLATE)
    prompt = tokenization.load(str(path)).chat_prompt(MESSAGES)
    assert prompt.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert prompt.endswith("<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n")

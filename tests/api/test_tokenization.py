"""Web-side tokenization: tokenizer.json + config.json only, cached, no torch."""

import subprocess
import sys

import pytest

from inference.serving import tokenization
from tests.api.conftest import write_model_dir


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

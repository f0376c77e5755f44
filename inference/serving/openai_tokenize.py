"""vLLM's tokenizer endpoints: `POST /tokenize`, `POST /detokenize`, `GET /tokenizer_info`.

The shapes are vLLM's (vllm/entrypoints/openai/protocol.py), so clients written for a vLLM
server (lm-evaluation-harness, load generators) find what they probe for:

- `/tokenize` {model?, prompt, add_special_tokens=true, return_token_strs=false} or
  {model?, messages, add_generation_prompt=true, add_special_tokens=false, ...}
  -> {count, max_model_len, tokens, token_strs (null unless asked)};
- `/detokenize` {model?, tokens} -> {prompt};
- `/tokenizer_info?model=` -> the model's tokenizer_config.json (its JSON values) with
  `tokenizer_class`, as vLLM answers with its tokenizer's init kwargs.

`model` is a pipeline name, as on /v1; it may be left out when the server serves one model
(vLLM's are optional: it serves one). The same Bearer API keys, role ("generate") and OpenAI
error objects as /v1 (the `endpoint` decorator); tokenization is the web process's own
(`tokenizers`, never torch), the one /v1 uses for its prompts.
"""

from __future__ import annotations

import json
from typing import Any

from asgiref.sync import sync_to_async
from django.http import JsonResponse

from fleet.accounts.access import can
from inference.serving.openai_api import Caller, endpoint, usable_pipelines
from inference.serving.openai_errors import OpenAIError
from inference.serving.openai_jobs import refuse_while_warming_up
from inference.serving.openai_request import message_text
from inference.serving.request_rules import ModelNotFound, pipeline_named, tokenizer_for
from inference.serving.tokenization import ModelTokenizer

MAX_DETOKENIZE = 1_000_000  # ids in one /detokenize request (the body limit comes first)


def _flag(body: dict, name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise OpenAIError(400, f"'{name}' must be a boolean.", param=name)
    return value


def _tokenizer(user, model) -> ModelTokenizer:
    """Sync: the tokenizer of the named pipeline, or of the only one the caller may use when
    `model` is left out; 404 for a model the caller may not use, as /v1/models hides it."""
    if model is None:
        usable = usable_pipelines(user)
        if len(usable) != 1:
            raise OpenAIError(
                400,
                "'model' is required: this server serves "
                + (f"{len(usable)} models." if usable else "no model to you."),
                param="model",
            )
        pipeline = usable[0]
    else:
        pipeline = pipeline_named(model)
        if not can(user, "generate", pipeline):
            raise ModelNotFound(model)
    refuse_while_warming_up(pipeline)
    return tokenizer_for(pipeline)


def _tokenize(caller: Caller) -> dict:
    body = caller.body
    tok = _tokenizer(caller.user, body.get("model"))
    has_prompt, has_messages = "prompt" in body, "messages" in body
    if has_prompt == has_messages:
        raise OpenAIError(400, "Give exactly one of 'prompt' and 'messages'.", param="prompt")
    if has_prompt:
        text = body["prompt"]
        if not isinstance(text, str):
            raise OpenAIError(400, "'prompt' must be a string.", param="prompt")
        special = _flag(body, "add_special_tokens", True)
    else:
        messages = body["messages"]
        if not isinstance(messages, list) or not messages:
            raise OpenAIError(400, "'messages' must be a non-empty list.", param="messages")
        if _flag(body, "continue_final_message", False):
            raise OpenAIError(
                400,
                "'continue_final_message' is not supported by this server.",
                param="continue_final_message",
            )
        if body.get("chat_template") is not None:
            raise OpenAIError(
                400, "'chat_template' is not supported by this server.", param="chat_template"
            )
        turns = [message_text(m, i) for i, m in enumerate(messages)]
        text = tok.chat_prompt(
            [{"role": r, "content": c} for r, c in turns],
            add_generation_prompt=_flag(body, "add_generation_prompt", True),
        )
        special = _flag(body, "add_special_tokens", False)  # the template holds them
    strs = _flag(body, "return_token_strs", False)
    encoding = tok.tk.encode(text, add_special_tokens=special)
    ids = list(encoding.ids)
    return {
        "count": len(ids),
        "max_model_len": tok.context_length,
        "tokens": ids,
        "token_strs": list(encoding.tokens) if strs else None,
    }


def _detokenize(caller: Caller) -> dict:
    body = caller.body
    tok = _tokenizer(caller.user, body.get("model"))
    ids = body.get("tokens")
    vocab = tok.tk.get_vocab_size(with_added_tokens=True)
    if (
        not isinstance(ids, list)
        or len(ids) > MAX_DETOKENIZE
        or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab for i in ids)
    ):
        raise OpenAIError(
            400, f"'tokens' must be a list of token ids from 0 to {vocab - 1}.", param="tokens"
        )
    return {"prompt": tok.tk.decode(ids, skip_special_tokens=False)}


def _tokenizer_info(caller: Caller, model) -> dict:
    tok = _tokenizer(caller.user, model)
    config: dict[str, Any] = {}
    path = tok.path / "tokenizer_config.json"
    if path.exists():
        try:
            loaded = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise OpenAIError(
                503,
                "The model's tokenizer_config.json cannot be read.",
                type="server_error",
                code="model_not_available",
            ) from exc
        config = loaded if isinstance(loaded, dict) else {}
    config.setdefault("tokenizer_class", "PreTrainedTokenizerFast")
    config.setdefault("model_max_length", tok.context_length)
    if tok.chat_template is not None:
        config["chat_template"] = tok.chat_template
    config["vocab_size"] = tok.tk.get_vocab_size(with_added_tokens=True)
    return config


@endpoint("POST", "generate")
async def tokenize(request, caller: Caller):
    return JsonResponse(await sync_to_async(_tokenize)(caller))


@endpoint("POST", "generate")
async def detokenize(request, caller: Caller):
    return JsonResponse(await sync_to_async(_detokenize)(caller))


@endpoint("GET", "generate")
async def tokenizer_info(request, caller: Caller):
    model = request.GET.get("model")
    return JsonResponse(await sync_to_async(_tokenizer_info)(caller, model))

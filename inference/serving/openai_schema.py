"""The OpenAI-compatible routes (/v1/… and vLLM's tokenizer paths) in the OpenAPI schema.

They are plain async Django views (OpenAI's JSON and SSE, OpenAI's error shape), not DRF, so
drf-spectacular does not see them: this post-processing hook (SPECTACULAR_SETTINGS) adds them,
with the request fields `openai_request` reads and the bodies `openai_format` writes.
`tests/serving/test_openai_schema.py` checks the list against the URL patterns.
"""

from __future__ import annotations

TAG = "openai"
SECURITY: list[dict[str, list]] = [
    {"apiKey": []}
]  # a bearer API key only, as OpenAI clients send it

STRING_OR_LIST = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
# the options completions and chat share (openai_request.common_options and the sampling ones)
COMMON = {
    "model": {"type": "string", "description": "A pipeline name (GET /v1/models)."},
    "max_tokens": {"type": "integer", "minimum": 1},
    "temperature": {"type": "number", "minimum": 0},
    "top_p": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 1},
    "seed": {"type": "integer"},
    "stop": STRING_OR_LIST,
    "ignore_eos": {
        "type": "boolean",
        "default": False,
        "description": "vLLM's extension: generate max_tokens, past the end of sequence.",
    },
    "n": {"type": "integer", "minimum": 1, "maximum": 16, "default": 1},
    "stream": {"type": "boolean", "default": False, "description": "Server-sent events."},
    "stream_options": {
        "type": "object",
        "properties": {"include_usage": {"type": "boolean"}},
    },
    "return_spec_metrics": {
        "type": "boolean",
        "description": "Tandem: the request's speculative-decoding figures in the response.",
    },
}
COMPLETIONS_BODY = {
    "type": "object",
    "required": ["model", "prompt"],
    "properties": {
        **COMMON,
        "prompt": {
            "oneOf": [
                {"type": "string"},
                {"type": "array", "items": {"type": "string"}, "maxItems": 64},
                {"type": "array", "items": {"type": "integer"}},
            ]
        },
        "best_of": {"type": "integer", "minimum": 1, "maximum": 16},
        "logprobs": {"type": "integer", "minimum": 0, "maximum": 20},
        "echo": {"type": "boolean"},
    },
}
MESSAGES = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["role", "content"],
        "properties": {
            "role": {"enum": ["system", "developer", "user", "assistant"]},
            "content": {"type": "string"},
        },
    },
}
CHAT_BODY = {
    "type": "object",
    "required": ["model", "messages"],
    "properties": {
        **COMMON,
        "messages": MESSAGES,
        "logprobs": {"type": "boolean"},
        "top_logprobs": {"type": "integer", "minimum": 0, "maximum": 20},
    },
}
USAGE = {
    "type": "object",
    "properties": {
        "prompt_tokens": {"type": "integer"},
        "completion_tokens": {"type": "integer"},
        "total_tokens": {"type": "integer"},
    },
}


def _result(obj: str, choice: dict) -> dict:
    return {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "object": {"enum": [obj]},
            "created": {"type": "integer"},
            "model": {"type": "string"},
            "choices": {"type": "array", "items": choice},
            "usage": USAGE,
        },
    }


FINISH = {"enum": ["stop", "length", "abort"], "nullable": True}
COMPLETION = _result(
    "text_completion",
    {
        "type": "object",
        "properties": {
            "index": {"type": "integer"},
            "text": {"type": "string"},
            "finish_reason": FINISH,
            "logprobs": {"type": "object", "nullable": True},
        },
    },
)
CHAT_COMPLETION = _result(
    "chat.completion",
    {
        "type": "object",
        "properties": {
            "index": {"type": "integer"},
            "message": {
                "type": "object",
                "properties": {"role": {"enum": ["assistant"]}, "content": {"type": "string"}},
            },
            "finish_reason": FINISH,
            "logprobs": {"type": "object", "nullable": True},
        },
    },
)
MODEL = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "object": {"enum": ["model"]},
        "created": {"type": "integer"},
        "owned_by": {"type": "string"},
    },
}
MODEL_LIST = {
    "type": "object",
    "properties": {"object": {"enum": ["list"]}, "data": {"type": "array", "items": MODEL}},
}
ERROR = {
    "type": "object",
    "description": "OpenAI's error shape.",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": "string", "nullable": True},
                "code": {"type": "string", "nullable": True},
            },
        }
    },
}
TOKENIZE_BODY = {
    "type": "object",
    "required": ["model"],
    "properties": {
        "model": {"type": "string"},
        "prompt": {"type": "string"},
        "messages": MESSAGES,
        "add_special_tokens": {"type": "boolean"},
    },
}
DETOKENIZE_BODY = {
    "type": "object",
    "required": ["model", "tokens"],
    "properties": {
        "model": {"type": "string"},
        "tokens": {"type": "array", "items": {"type": "integer"}},
    },
}
ANY_OBJECT = {"type": "object", "additionalProperties": True}


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict) -> dict:
    return {"application/json": {"schema": schema}}


def _operation(op_id: str, summary: str, ok: dict, *, body: str | None = None, stream=False):
    errors = {
        "400": "Invalid request: the error names the parameter.",
        "401": "No API key, or an invalid one.",
        "403": "The key's role may not do this.",
        "404": "No such model (pipeline).",
        "503": "The pipeline is warming up or has no route to a drafter and verifier.",
    }
    ok_content = _json(ok)
    if stream:
        ok_content["text/event-stream"] = {
            "schema": {"type": "string", "description": "`data: <chunk>` lines, then [DONE]."}
        }
    operation = {
        "operationId": op_id,
        "summary": summary,
        "tags": [TAG],
        "security": SECURITY,
        "responses": {
            "200": {"description": "OK", "content": ok_content},
            **{
                code: {"description": text, "content": _json(_ref("OpenAIError"))}
                for code, text in errors.items()
            },
        },
    }
    if body:
        operation["requestBody"] = {"required": True, "content": _json(_ref(body))}
    return operation


MODEL_PARAM = {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}

PATHS = {
    "/v1/models": {
        "get": _operation("openai_models", "The models (pipelines) this key may use.", MODEL_LIST)
    },
    "/v1/models/{model}": {
        "get": {
            **_operation("openai_model", "One model (pipeline).", MODEL),
            "parameters": [MODEL_PARAM],
        }
    },
    "/v1/completions": {
        "post": _operation(
            "openai_completions",
            "Text completions, speculatively decoded by the pipeline named `model`.",
            _ref("OpenAICompletion"),
            body="OpenAICompletionRequest",
            stream=True,
        )
    },
    "/v1/chat/completions": {
        "post": _operation(
            "openai_chat_completions",
            "Chat completions (the pipeline's chat template), speculatively decoded.",
            _ref("OpenAIChatCompletion"),
            body="OpenAIChatCompletionRequest",
            stream=True,
        )
    },
    "/tokenize": {
        "post": _operation(
            "tokenize",
            "vLLM's tokenize: a prompt or messages to token ids.",
            ANY_OBJECT,
            body="OpenAITokenizeRequest",
        )
    },
    "/detokenize": {
        "post": _operation(
            "detokenize",
            "vLLM's detokenize: token ids to text.",
            ANY_OBJECT,
            body="OpenAIDetokenizeRequest",
        )
    },
    "/tokenizer_info": {
        "get": {
            **_operation("tokenizer_info", "vLLM's tokenizer info of a model.", ANY_OBJECT),
            "parameters": [{"name": "model", "in": "query", "schema": {"type": "string"}}],
        }
    },
}
SCHEMAS = {
    "OpenAICompletionRequest": COMPLETIONS_BODY,
    "OpenAIChatCompletionRequest": CHAT_BODY,
    "OpenAICompletion": COMPLETION,
    "OpenAIChatCompletion": CHAT_COMPLETION,
    "OpenAITokenizeRequest": TOKENIZE_BODY,
    "OpenAIDetokenizeRequest": DETOKENIZE_BODY,
    "OpenAIError": ERROR,
}


def document_openai(result, generator, request, public):
    """drf-spectacular POSTPROCESSING_HOOKS entry: add the OpenAI-compatible paths."""
    result.setdefault("paths", {}).update(PATHS)
    result.setdefault("components", {}).setdefault("schemas", {}).update(SCHEMAS)
    tags = result.setdefault("tags", [])
    if not any(t.get("name") == TAG for t in tags):
        tags.append(
            {
                "name": TAG,
                "description": "OpenAI-compatible inference (/v1) and vLLM's tokenizer paths: "
                "OpenAI's request and error shapes, an API key as the bearer token.",
            }
        )
    return result

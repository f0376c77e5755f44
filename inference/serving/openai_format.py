"""The OpenAI API's shapes: error objects, request options and prompts, response bodies and
stream chunks, kept apart from the views (`openai_api.py`) that use them.

Chunks follow OpenAI's exactly: `text_completion` chunks carry `choices[{index, text,
logprobs, finish_reason}]`; `chat.completion.chunk`s carry `choices[{index, delta, logprobs,
finish_reason}]`, the first delta being the role; with `stream_options.include_usage` every
chunk has `"usage": null` and a last one has `"choices": []` and the usage.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from django.http import JsonResponse

from inference.models import Generation
from inference.serving.request_rules import ModelNotFound, RequestError

CHAT_ROLES = {"system", "developer", "user", "assistant"}

# Parameters we accept only at their neutral value (clients often send the defaults).
NEUTRAL = {
    "presence_penalty": (0, 0.0, None),
    "frequency_penalty": (0, 0.0, None),
    "logit_bias": (None, {}),
    "logprobs": (None, False, 0),
    "top_logprobs": (None, 0),
    "echo": (None, False),
    "best_of": (None, 1),
    "suffix": (None, ""),
    "tools": (None, []),
    "functions": (None, []),
    "tool_choice": (None, "none"),
    "function_call": (None, "none"),
    "response_format": (None, {"type": "text"}),
}


class OpenAIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.headers = headers or {}
        self.status, self.message, self.type, self.param, self.code = (
            status,
            message,
            type,
            param,
            code,
        )

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> JsonResponse:
        return JsonResponse(self.body(), status=self.status, headers=self.headers)


def from_request_error(exc: RequestError) -> OpenAIError:
    status = 404 if isinstance(exc, ModelNotFound) else 400
    return OpenAIError(status, exc.message, param=exc.param, code=exc.code)


@dataclass
class Options:
    stream: bool
    include_usage: bool


def common_options(body: dict) -> Options:
    for name, neutral in NEUTRAL.items():
        if name in body and body[name] not in neutral:
            raise OpenAIError(400, f"'{name}' is not supported by this server.", param=name)
    n = body.get("n", 1)
    if n is not None and (isinstance(n, bool) or n != 1):
        raise OpenAIError(400, "Only n=1 is supported.", param="n")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise OpenAIError(400, "'stream' must be a boolean.", param="stream")
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise OpenAIError(400, "'stream_options' must be an object.", param="stream_options")
    if stream_options and not stream:
        raise OpenAIError(
            400, "'stream_options' is only allowed when 'stream' is true.", param="stream_options"
        )
    include_usage = stream_options.get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise OpenAIError(
            400, "'stream_options.include_usage' must be a boolean.", param="stream_options"
        )
    return Options(stream=stream, include_usage=include_usage)


def completion_prompt(body: dict) -> str | list[int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # one prompt given as a batch of one
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return prompt
    if isinstance(prompt, list) and len(prompt) > 1:
        raise OpenAIError(400, "Only one prompt per request is supported.", param="prompt")
    raise OpenAIError(400, "'prompt' must be a string or a list of token ids.", param="prompt")


def message_text(message, index: int) -> tuple[str, str]:
    if not isinstance(message, dict):
        raise OpenAIError(400, f"messages[{index}] must be an object.", param=f"messages.[{index}]")
    role, content = message.get("role"), message.get("content")
    if role not in CHAT_ROLES:
        raise OpenAIError(
            400,
            f"messages[{index}].role must be one of {sorted(CHAT_ROLES)}.",
            param=f"messages.[{index}].role",
        )
    if isinstance(content, list):  # content parts: only text ones
        if not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
            raise OpenAIError(
                400,
                "Only text content parts are supported.",
                param=f"messages.[{index}].content",
            )
        content = "".join(str(p.get("text", "")) for p in content)
    if not isinstance(content, str):
        raise OpenAIError(
            400, f"messages[{index}].content must be a string.", param=f"messages.[{index}].content"
        )
    return ("system" if role == "developer" else role), content


@dataclass
class Job:
    """One submitted generation and how to render it."""

    generation: Generation
    model: str
    chat: bool
    options: Options
    prompt_tokens: int
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def id(self) -> str:
        return ("chatcmpl-" if self.chat else "cmpl-") + self.generation.id.hex

    @property
    def object(self) -> str:
        if self.options.stream:
            return "chat.completion.chunk" if self.chat else "text_completion"
        return "chat.completion" if self.chat else "text_completion"

    def usage(self, completion_tokens: int) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": self.prompt_tokens + completion_tokens,
        }


def openai_finish_reason(reason: str | None) -> str:
    return "length" if reason == "length" else "stop"


def full_body(job: Job, text: str, reason: str, n: int) -> dict:
    if job.chat:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text, "refusal": None},
            "logprobs": None,
            "finish_reason": reason,
        }
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
    return {
        "id": job.id,
        "object": job.object,
        "created": job.created,
        "model": job.model,
        "system_fingerprint": None,
        "choices": [choice],
        "usage": job.usage(n),
    }


def chunk(job: Job, *, text: str | None = None, role: bool = False, reason=None) -> dict:
    if job.chat:
        delta: dict = {}
        if role:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": reason}
    out = {
        "id": job.id,
        "object": job.object,
        "created": job.created,
        "model": job.model,
        "system_fingerprint": None,
        "choices": [choice],
    }
    if job.options.include_usage:
        out["usage"] = None
    return out


def sse_data(payload) -> bytes:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()

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
from typing import Any

from django.http import JsonResponse

from inference.models import Generation
from inference.serving.openai_logprobs import chat_logprobs, completion_logprobs
from inference.serving.request_rules import ModelNotFound, RequestError
from inference.serving.tokenization import ModelTokenizer

CHAT_ROLES = {"system", "developer", "user", "assistant"}

MAX_N = 16  # choices per prompt
MAX_BEST_OF = 16  # samples per prompt when best_of picks the n most likely
MAX_PROMPTS = 64  # prompts in one completions request
MAX_SEQUENCES = 128  # generations one request may start: prompts x best_of
MAX_LOGPROBS = 20  # alternatives per token, like vLLM's max_logprobs and OpenAI's top_logprobs

# Parameters we accept only at their neutral value (clients often send the defaults).
NEUTRAL = {
    "presence_penalty": (0, 0.0, None),
    "frequency_penalty": (0, 0.0, None),
    "logit_bias": (None, {}),
    "suffix": (None, ""),
    "tools": (None, []),
    "functions": (None, []),
    "tool_choice": (None, "none"),
    "function_call": (None, "none"),
    "response_format": (None, {"type": "text"}),
}
CHAT_NEUTRAL = {"echo": (None, False), "best_of": (None, 1)}  # completions-only parameters
COMPLETIONS_NEUTRAL = {"top_logprobs": (None, 0)}  # completions take logprobs: N


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
    n: int = 1  # choices per prompt
    best_of: int = 1  # samples per prompt (>= n): the n with the highest logprob are returned
    logprobs: int | None = None  # alternatives per token; None: no logprobs asked
    echo: bool = False  # completions: the prompt (and its logprobs) before the completion

    @property
    def sample_logprobs(self) -> int | None:
        """What the workers compute per emitted token: best_of ranks samples by their
        logprob, so it needs them even when the client did not ask."""
        if self.logprobs is not None:
            return self.logprobs
        return 0 if self.best_of > self.n else None

    @property
    def prompt_logprobs(self) -> int | None:
        return self.logprobs if self.echo else None


def _count(body: dict, name: str, low: int, high: int, default: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise OpenAIError(400, f"'{name}' must be an integer from {low} to {high}.", param=name)
    return value


def _flag(body: dict, name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise OpenAIError(400, f"'{name}' must be a boolean.", param=name)
    return value


def common_options(body: dict, *, chat: bool = False) -> Options:
    neutral = NEUTRAL | (CHAT_NEUTRAL if chat else COMPLETIONS_NEUTRAL)
    for name, values in neutral.items():
        if name in body and body[name] not in values:
            raise OpenAIError(400, f"'{name}' is not supported by this server.", param=name)
    n = _count(body, "n", 1, MAX_N, 1)
    stream = _flag(body, "stream")
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
    options = Options(stream=stream, include_usage=include_usage, n=n, best_of=n)
    if chat:
        top = _count(body, "top_logprobs", 0, MAX_LOGPROBS, 0)
        if _flag(body, "logprobs"):
            options.logprobs = top
        elif top:  # top_logprobs 0 is the neutral value clients send
            raise OpenAIError(
                400, "'top_logprobs' needs 'logprobs' to be true.", param="top_logprobs"
            )
        return options
    if body.get("logprobs") is not None and body["logprobs"] is not False:  # 0 is on
        options.logprobs = _count(body, "logprobs", 0, MAX_LOGPROBS, 0)
    options.echo = _flag(body, "echo")
    options.best_of = _count(body, "best_of", 1, MAX_BEST_OF, n)
    if options.best_of < n:
        raise OpenAIError(400, "'best_of' must be at least 'n'.", param="best_of")
    if stream and options.best_of > n:
        raise OpenAIError(400, "'best_of' cannot be used with 'stream'.", param="best_of")
    return options


def _token_ids(value) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(t, int) and not isinstance(t, bool) for t in value)
    )


def completion_prompts(body: dict, options: Options) -> list[str | list[int]]:
    """The prompts of a completions request: a string, a list of strings, token ids, or a
    list of token id lists (what lm-evaluation-harness sends)."""
    prompt: Any = body.get("prompt")
    prompts: list[str | list[int]]
    if isinstance(prompt, str) or _token_ids(prompt):
        prompts = [prompt]
    elif (
        isinstance(prompt, list)
        and prompt
        and (all(isinstance(p, str) for p in prompt) or all(_token_ids(p) for p in prompt))
    ):
        prompts = list(prompt)
    else:
        raise OpenAIError(
            400,
            "'prompt' must be a string, a list of strings, a list of token ids, or a list of "
            "lists of token ids.",
            param="prompt",
        )
    if len(prompts) > MAX_PROMPTS:
        raise OpenAIError(
            400, f"At most {MAX_PROMPTS} prompts per request are supported.", param="prompt"
        )
    if len(prompts) * options.best_of > MAX_SEQUENCES:
        raise OpenAIError(
            400,
            f"{len(prompts)} prompts x {options.best_of} samples is more than the "
            f"{MAX_SEQUENCES} sequences one request may start.",
            param="best_of" if options.best_of > options.n else "n",
        )
    return prompts


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
class Choice:
    """One generation of a request and what its stream has brought so far."""

    generation: Generation
    prompt_index: int
    prompt: str
    prompt_ids: list[int]
    index: int = 0  # in the response
    text: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    logprobs: list = field(default_factory=list)  # one entry per token, when asked
    prompt_logprobs: list | None = None
    completion_tokens: int = 0
    finish_reason: str | None = None  # OpenAI's, once done
    sent_chars: int = 0  # a stream's text so far (for text_offset)

    def take(self, event: dict) -> None:
        """Fold a tokens or done event of this generation's stream in."""
        if self.prompt_logprobs is None and event.get("prompt_logprobs") is not None:
            self.prompt_logprobs = event["prompt_logprobs"]
        if event.get("type") == "tokens":
            self.text.append(event.get("text", ""))
            self.tokens.extend(event.get("tokens", []))
            self.logprobs.extend(event.get("logprobs") or [])
            self.completion_tokens = event.get("n", self.completion_tokens)
        elif event.get("type") == "done":
            usage = event.get("usage") or {}
            self.completion_tokens = usage.get("completion_tokens", self.completion_tokens)
            self.finish_reason = openai_finish_reason(event.get("finish_reason"))

    @property
    def cumulative_logprob(self) -> float:
        return sum(entry[0] for entry in self.logprobs)


@dataclass
class Job:
    """The generations of one request (prompts x samples) and how to render them."""

    choices: list[Choice]
    model: str
    chat: bool
    options: Options
    tokenizer: ModelTokenizer | None = None  # for token texts (logprobs)
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def generation(self) -> Generation:
        return self.choices[0].generation

    @property
    def id(self) -> str:
        return ("chatcmpl-" if self.chat else "cmpl-") + self.generation.id.hex

    @property
    def object(self) -> str:
        if self.options.stream:
            return "chat.completion.chunk" if self.chat else "text_completion"
        return "chat.completion" if self.chat else "text_completion"

    @property
    def prompt_tokens(self) -> int:
        seen = {c.prompt_index: len(c.prompt_ids) for c in self.choices}
        return sum(seen.values())

    def usage(self, completion_tokens: int | None = None) -> dict:
        if completion_tokens is None:  # every sample counts, the best_of losers too
            completion_tokens = sum(c.completion_tokens for c in self.choices)
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": self.prompt_tokens + completion_tokens,
        }

    def returned(self) -> list[Choice]:
        """The choices of the response, in index order: per prompt the n samples (with
        best_of, the n with the highest cumulative logprob, most likely first)."""
        n, best_of = self.options.n, self.options.best_of
        out = []
        for p in sorted({c.prompt_index for c in self.choices}):
            mine = [c for c in self.choices if c.prompt_index == p]
            if best_of > n:
                mine = sorted(mine, key=lambda c: c.cumulative_logprob, reverse=True)[:n]
            for rank, c in enumerate(mine):
                c.index = p * n + rank
                out.append(c)
        return out


def openai_finish_reason(reason: str | None) -> str:
    return "length" if reason == "length" else "stop"


def _logprobs_body(job: Job, ids: list[int], entries: list, offset: int):
    if job.options.logprobs is None or job.tokenizer is None:
        return None
    entries = list(entries[: len(ids)]) + [None] * (len(ids) - len(entries))
    if job.chat:
        return {"content": chat_logprobs(job.tokenizer, ids, entries), "refusal": None}
    return completion_logprobs(job.tokenizer, ids, entries, offset=offset)


def _echo(job: Job, c: Choice) -> tuple[str, list[int], list]:
    """The echoed prompt's text, ids and logprob entries (nothing unless echo)."""
    if not job.options.echo:
        return "", [], []
    entries = c.prompt_logprobs or [None] * len(c.prompt_ids)
    return c.prompt, list(c.prompt_ids), list(entries)


def full_body(job: Job) -> dict:
    choices = []
    for c in job.returned():
        text = "".join(c.text)
        if job.chat:
            lp = _logprobs_body(job, c.tokens, c.logprobs, 0)
            choice = {
                "index": c.index,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": lp,
                "finish_reason": c.finish_reason,
            }
        else:
            prompt, ids, entries = _echo(job, c)
            lp = _logprobs_body(job, ids, entries, 0)
            if lp is not None:  # the completion's offsets start after the echoed prompt
                rest = _logprobs_body(job, c.tokens, c.logprobs, len(prompt))
                lp = {key: lp[key] + rest[key] for key in lp}
            choice = {
                "index": c.index,
                "text": prompt + text,
                "logprobs": lp,
                "finish_reason": c.finish_reason,
            }
        choices.append(choice)
    return {
        "id": job.id,
        "object": job.object,
        "created": job.created,
        "model": job.model,
        "system_fingerprint": None,
        "choices": choices,
        "usage": job.usage(),
    }


def chunk(
    job: Job,
    choice: Choice | None = None,
    *,
    text: str | None = None,
    role: bool = False,
    reason=None,
    tokens: list[int] | None = None,
    entries: list | None = None,
) -> dict:
    """A stream chunk for one choice (``tokens``/``entries``: the logprobs of its text)."""
    index = choice.index if choice is not None else 0
    lp = None
    if choice is not None and tokens:
        lp = _logprobs_body(job, tokens, entries or [], choice.sent_chars)
    if choice is not None and text:
        choice.sent_chars += len(text)
    if job.chat:
        delta: dict = {}
        if role:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        body = {"index": index, "delta": delta, "logprobs": lp, "finish_reason": reason}
    else:
        body = {"index": index, "text": text or "", "logprobs": lp, "finish_reason": reason}
    out = {
        "id": job.id,
        "object": job.object,
        "created": job.created,
        "model": job.model,
        "system_fingerprint": None,
        "choices": [body],
    }
    if job.options.include_usage:
        out["usage"] = None
    return out


def sse_data(payload) -> bytes:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()

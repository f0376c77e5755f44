"""What an OpenAI request asks for, read and bounded once: the options common to
completions and chat (stream, n, best_of, logprobs, echo), the prompts of a completions
request, a chat message's text. Every refusal is an `OpenAIError` naming the parameter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inference.serving.openai_errors import OpenAIError

CHAT_ROLES = {"system", "developer", "user", "assistant"}

MAX_N = 16  # choices per prompt
MAX_BEST_OF = 16  # samples per prompt when best_of picks the n most likely
MAX_PROMPTS = 64  # prompts in one completions request
MAX_SEQUENCES = 128  # generations one request may start: prompts x best_of
MAX_LOGPROBS = 20  # alternatives per token, like vLLM's max_logprobs and OpenAI's top_logprobs

# Parameters we accept only at their neutral value (clients often send the defaults).
NEUTRAL: dict[str, tuple] = {
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


@dataclass
class Options:
    stream: bool
    include_usage: bool
    n: int = 1  # choices per prompt
    best_of: int = 1  # samples per prompt (>= n): the n with the highest logprob are returned
    logprobs: int | None = None  # alternatives per token; None: no logprobs asked
    echo: bool = False  # completions: the prompt (and its logprobs) before the completion
    spec_metrics: bool = False  # "return_spec_metrics": per-request figures (openai_spec)

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
    include_usage = stream_options.get("include_usage")
    include_usage = False if include_usage is None else include_usage  # null: absent
    if not isinstance(include_usage, bool):
        raise OpenAIError(
            400, "'stream_options.include_usage' must be a boolean.", param="stream_options"
        )
    options = Options(stream=stream, include_usage=include_usage, n=n, best_of=n)
    options.spec_metrics = _flag(body, "return_spec_metrics")
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

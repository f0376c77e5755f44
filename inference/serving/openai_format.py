"""The OpenAI API's response shapes: error objects, response bodies and stream chunks, kept
apart from the views (`openai_api.py`) that use them; what a request asks for is read in
`openai_request.py`.

Chunks follow OpenAI's exactly: `text_completion` chunks carry `choices[{index, text,
logprobs, finish_reason}]`; `chat.completion.chunk`s carry `choices[{index, delta, logprobs,
finish_reason}]`, the first delta being the role; with `stream_options.include_usage` every
chunk has `"usage": null` and a last one has `"choices": []` and the usage.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from inference.models import Generation
from inference.serving import openai_spec
from inference.serving.openai_errors import OpenAIError
from inference.serving.openai_logprobs import chat_logprobs, completion_logprobs
from inference.serving.request_rules import ModelNotFound, RequestError
from inference.serving.tokenization import ModelTokenizer

if TYPE_CHECKING:
    from inference.serving.openai_request import Options


def from_request_error(exc: RequestError) -> OpenAIError:
    status = 404 if isinstance(exc, ModelNotFound) else 400
    return OpenAIError(status, exc.message, param=exc.param, code=exc.code)


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
    spec: dict | None = None  # the done event's speculative-decoding counters

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
            self.spec = event.get("spec")

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
    body = {
        "id": job.id,
        "object": job.object,
        "created": job.created,
        "model": job.model,
        "system_fingerprint": None,
        "choices": choices,
        "usage": job.usage(),
    }
    if job.options.spec_metrics:
        body["metrics"] = openai_spec.metrics(job.choices)
    return body


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

"""What a /v1/completions or /v1/chat/completions request becomes, whoever serves it: the
Django views (`openai_api`: the test client, any method but POST) and the front door
(`front_door`: production POSTs under ASGI) both call these, so they cannot drift apart.

A request is read in two halves. `plan_*` reads the body on the event loop (options,
prompts, messages: no I/O); `accept` is the ONE visit to a sync lane: the key, the pipeline,
the tokenization and the generation rows. What follows (the answer) is `openai_stream`'s.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import transaction

from fleet.guard.body_rules import InputError, load_json
from inference import services
from inference.serving import readiness
from inference.serving.openai_errors import OpenAIError
from inference.serving.openai_format import Choice, Job
from inference.serving.openai_request import (
    Options,
    common_options,
    completion_prompts,
    message_text,
)
from inference.serving.request_rules import (
    Prepared,
    RequestError,
    pipeline_named,
    prepare,
    tokenizer_for,
)
from inference.serving.tokenization import ModelTokenizer

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
# Prompts may hold NUL (a byte-level model's text; the service stores it as U+FFFD).
NUL_OK = frozenset({"prompt", "messages"})


@dataclass
class Plan:
    """A generating request, read: its options, its prompts (text, token ids, or a callable
    that renders a chat's prompt from the pipeline), and how `prepare` bounds them."""

    body: dict
    options: Options
    prompts: list
    chat: bool = False
    prepare_kw: dict = field(default_factory=dict)


def plan_completions(body: dict) -> Plan:
    options = common_options(body)
    prompts = completion_prompts(body, options)
    kw = {
        "default_max_tokens": COMPLETIONS_DEFAULT_MAX_TOKENS,
        "min_max_tokens": 0 if options.echo else 1,  # echo + max_tokens 0: score the prompt
    }
    return Plan(body, options, prompts, prepare_kw=kw)


def plan_chat(body: dict) -> Plan:
    options = common_options(body, chat=True)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise OpenAIError(400, "'messages' must be a non-empty list.", param="messages")
    turns = [message_text(m, i) for i, m in enumerate(messages)]

    def render(pipeline) -> str:
        return tokenizer_for(pipeline).chat_prompt([{"role": r, "content": c} for r, c in turns])

    max_param = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    kw = {"default_max_tokens": None, "max_tokens_param": max_param}
    return Plan(body, options, [render], chat=True, prepare_kw=kw)


def json_body(raw: bytes) -> dict:
    """The request's JSON object (400 for anything else), its nulls dropped."""
    try:
        body = load_json(raw or b"null", nul_ok=NUL_OK)
    except InputError as exc:
        raise OpenAIError(400, exc.message, param=exc.path or None) from exc
    if not isinstance(body, dict):
        raise OpenAIError(400, "The request body must be a JSON object.")
    # `null` means absent, for every optional parameter (clients send their defaults as
    # null: `"max_completion_tokens": null` must not hide `max_tokens`); a required one left
    # null is refused as missing.
    return {name: value for name, value in body.items() if value is not None}


PLANS: dict[str, Callable[[dict], Plan]] = {
    "/v1/completions": plan_completions,
    "/v1/chat/completions": plan_chat,
}


def accept(caller, plan: Plan) -> Job:
    """Sync (a lane): 401/403/429 for the key (`caller.authorize`), the pipeline, the
    tokenization, then the rows; the Job whose events the answer follows."""
    caller.authorize()
    prepared, tokenizer = _prepare(
        plan.body,
        plan.prompts,
        chat=plan.chat,
        logprobs=plan.options.logprobs is not None,
        **plan.prepare_kw,
    )
    choices = _submit(prepared, plan.options, caller.user)
    return Job(
        choices=choices,
        model=prepared[0].pipeline.name,
        chat=plan.chat,
        options=plan.options,
        tokenizer=tokenizer,
    )


def _prepare(
    body: dict,
    prompts: list,
    *,
    default_max_tokens,
    max_tokens_param="max_tokens",
    min_max_tokens: int = 1,
    chat: bool = False,
    logprobs: bool = False,
) -> tuple[list[Prepared], ModelTokenizer | None]:
    """Sync: the pipeline lookup (DB) and tokenization (CPU) of each prompt (a chat's one
    prompt is rendered from the pipeline's chat template: a callable); with `logprobs`, the
    tokenizer too (token texts)."""
    pipeline = pipeline_named(body.get("model"))
    refuse_while_warming_up(pipeline)
    prepared = [
        prepare(
            pipeline=pipeline,
            prompt=prompt(pipeline) if callable(prompt) else prompt,
            max_tokens=body.get(max_tokens_param),
            default_max_tokens=default_max_tokens,
            max_tokens_param=max_tokens_param,
            min_max_tokens=min_max_tokens,
            prompt_param="messages" if chat else "prompt",
            temperature=body.get("temperature"),
            top_p=body.get("top_p"),
            top_k=body.get("top_k"),
            seed=body.get("seed"),
            stop=body.get("stop"),
            ignore_eos=body.get("ignore_eos"),
        )
        for prompt in prompts
    ]
    return prepared, tokenizer_for(pipeline) if logprobs else None


def refuse_while_warming_up(pipeline) -> None:
    """503 + Retry-After while the pipeline's model files are still being made (trained,
    converted); a pipeline whose files are simply missing keeps its 400."""
    try:
        tokenizer_for(pipeline)  # cached per model path: the same lookup prepare() makes
    except RequestError as exc:
        state = readiness.not_ready(pipeline, cause=exc.message)
        if state.warming_up:
            raise NotReadyError(state) from exc
        raise


def sample_seed(seed: int | None, sample: int) -> int | None:
    """Sample j's seed of a seeded request with n/best_of > 1: independent, reproducible, and
    the request's own seed for the first sample (n=1 draws exactly as before)."""
    if seed is None or sample == 0:
        return seed
    return (seed + sample * 0x9E3779B97F4A7C15) % (1 << 63)


def _submit(prepared: list[Prepared], options: Options, user) -> list[Choice]:
    """One Generation row per prompt and sample (best_of of them), all or none. One row is
    one INSERT in autocommit (`generation_submit` opens no transaction of its own); several
    share one transaction."""
    choices = []
    several = len(prepared) * options.best_of > 1
    try:
        with transaction.atomic() if several else contextlib.nullcontext():
            for p, prep in enumerate(prepared):
                for j in range(options.best_of):
                    params = dict(prep.params)
                    params["seed"] = sample_seed(params.get("seed"), j)
                    if options.sample_logprobs is not None:
                        params["logprobs"] = options.sample_logprobs
                    if options.prompt_logprobs is not None:
                        params["prompt_logprobs"] = options.prompt_logprobs
                    generation = services.generation_submit(
                        pipeline=prep.pipeline,
                        prompt=prep.prompt,
                        prompt_tokens=prep.prompt_tokens,
                        params=params,
                        user=user,
                    )
                    choice = Choice(generation, p, prep.prompt, list(prep.prompt_tokens))
                    choice.index = p * options.n + j  # best_of > n: ranked at the end
                    choices.append(choice)
    except services.NoCapacity as exc:
        raise NotReadyError(readiness.not_ready(prepared[0].pipeline, cause=str(exc))) from exc
    return choices


class NotReadyError(OpenAIError):
    """503 + Retry-After: the pipeline is warming up, or short of healthy workers."""

    def __init__(self, state: readiness.NotReady):
        code = "model_not_ready" if state.warming_up else "no_capacity"
        super().__init__(
            503,
            state.message,
            type="server_error",
            code=code,
            headers={"Retry-After": str(state.retry_after_s)},
        )
        self.retry_after_s = state.retry_after_s

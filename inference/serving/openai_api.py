"""OpenAI-compatible endpoints under `/v1/`: models, completions, chat completions.

Async Django views (ASGI): a streaming answer is an async generator over the generation's
Redis stream, so an open stream holds no thread. Clients authenticate with a Tandem API key
as a Bearer token (`tdm_...`), exactly as they would with an OpenAI key; a model name is a
pipeline name. Every error is an OpenAI error object
`{"error": {"message", "type", "param", "code"}}` with the usual status (400, 401, 403, 404,
405, 503, 504), never an HTML page.

Finish reasons are OpenAI's: "length" when max_tokens ran out, "stop" otherwise (a stop
sequence, the end-of-sequence token, or a cancellation). The answer -- a body or a stream --
is `openai_stream`'s. A generating request visits the sync lane ONCE (key, pipeline,
tokenization, rows: `_run`); the event loop does the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import wraps

from asgiref.sync import sync_to_async
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from redis.exceptions import RedisError

from fleet.accounts.access import can
from fleet.accounts.principal import Refused, principal_for
from fleet.guard.body_rules import InputError, load_json
from inference import services
from inference.serving import openai_stream, readiness
from inference.serving.openai_errors import OpenAIError
from inference.serving.openai_format import Choice, Job, from_request_error
from inference.serving.openai_request import (
    Options,
    common_options,
    completion_prompts,
    message_text,
)
from inference.serving.request_rules import (
    ModelNotFound,
    Prepared,
    RequestError,
    pipeline_named,
    prepare,
    servable_pipelines,
    tokenizer_for,
)
from inference.serving.tokenization import ModelTokenizer

log = logging.getLogger(__name__)

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
# Prompts may hold NUL (a byte-level model's text; the service stores it as U+FFFD).
NUL_OK = frozenset({"prompt", "messages"})
# --- authentication, method and error handling: one decorator ------------------------------


def _principal(request):
    """(user, may_view, may_generate) for the request's Bearer key (`principal_for`; no
    session here); its refusals as OpenAIError (401, or 429 while the client's address is
    locked out of key authentication)."""
    try:
        user = principal_for(request, session=False)
    except Refused as refused:
        if refused.code == "locked_out":
            raise OpenAIError(
                429,
                refused.detail,
                type="rate_limit_error",
                code="rate_limit_exceeded",
                headers={"Retry-After": str(refused.retry_after)},
            ) from refused
        if refused.code == "missing_credentials":
            raise OpenAIError(
                401,
                "You didn't provide an API key. You need to provide your API key in an "
                "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                code="missing_api_key",
            ) from refused
        raise OpenAIError(
            401, "Incorrect API key provided.", code="invalid_api_key", type="invalid_request_error"
        ) from refused
    return user, can(user, "view"), can(user, "generate")


@dataclass
class Caller:
    """Who calls, found out on the sync lane: at once for reads, inside the one hop of a
    generating view (with its tokenization and submit), or after a refusal of the request
    itself, so that a client with a bad key hears about its key first, as before."""

    request: HttpRequest
    action: str
    body: dict = field(default_factory=dict)
    user: object = None
    may_view: bool = False
    may_generate: bool = False
    checked: bool = False

    def authorize(self) -> None:
        """Sync: 401/429 without a valid key, 403 without the role for `action`."""
        if self.checked:
            return
        self.checked = True
        self.user, self.may_view, self.may_generate = _principal(self.request)
        if not (self.may_generate if self.action == "generate" else self.may_view):
            raise OpenAIError(
                403,
                f"Your role does not allow this request (needs '{self.action}').",
                type="permission_error",
                code="insufficient_permissions",
            )


def endpoint(method: str, action: str, *, authorize_in_view: bool = False):
    """Wrap an async view: method check, Bearer auth, role check, JSON body, OpenAI errors.
    `authorize_in_view`: the view calls `caller.authorize()` in its own sync hop."""

    def decorate(view: Callable):
        @csrf_exempt
        @wraps(view)
        async def wrapper(request: HttpRequest, *args, **kwargs):
            caller = Caller(request, action)
            try:
                try:
                    if request.method != method:
                        raise OpenAIError(
                            405, f"Method {request.method} is not allowed here; use {method}."
                        )
                    if not authorize_in_view:
                        await sync_to_async(caller.authorize)()
                    if method == "POST":
                        caller.body = _json_body(request)
                    return await view(request, caller, *args, **kwargs)
                except (OpenAIError, RequestError):
                    if not caller.checked:  # the key's refusal comes first
                        await sync_to_async(caller.authorize)()
                    raise
            except OpenAIError as exc:
                return exc.response()
            except RequestError as exc:
                return from_request_error(exc).response()
            except asyncio.CancelledError:
                raise
            except (DatabaseError, RedisError) as exc:  # transient: tell the client to retry
                log.warning("OpenAI endpoint %s: %r", request.path, exc)
                return OpenAIError(
                    503,
                    "The server is busy; please retry the request.",
                    type="server_error",
                    code="server_busy",
                ).response()
            except Exception:
                log.exception("OpenAI endpoint %s failed", request.path)
                return OpenAIError(
                    500, "The server had an error processing your request.", type="server_error"
                ).response()

        return wrapper

    return decorate


def _json_body(request: HttpRequest) -> dict:
    try:
        raw = request.body
    except RequestDataTooBig as exc:
        raise OpenAIError(413, "The request body is too large.") from exc
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


# --- models -----------------------------------------------------------------------------------


def _model_object(pipeline) -> dict:
    return {
        "id": pipeline.name,
        "object": "model",
        "created": int(pipeline.created_at.timestamp()),
        "owned_by": "tandem",
    }


def usable_pipelines(user) -> list:
    return [p for p in servable_pipelines() if can(user, "generate", p)]


@endpoint("GET", "view")
async def models_list(request, caller: Caller):
    """Pipelines the caller may send requests to (none for a viewer, who may not generate)."""
    pipelines = await sync_to_async(usable_pipelines)(caller.user)
    return JsonResponse({"object": "list", "data": [_model_object(p) for p in pipelines]})


@endpoint("GET", "view")
async def model_detail(request, caller: Caller, model: str):
    pipelines = await sync_to_async(usable_pipelines)(caller.user)
    for pipeline in pipelines:
        if pipeline.name == model:
            return JsonResponse(_model_object(pipeline))
    raise ModelNotFound(model)


async def not_found(request, path: str = ""):
    return OpenAIError(
        404, f"Unknown request URL: {request.method} /v1/{path}.", code="unknown_url"
    ).response()


# --- request parsing --------------------------------------------------------------------------


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
    """One Generation row per prompt and sample (best_of of them), all or none."""
    choices = []
    several = len(prepared) * options.best_of > 1
    try:  # one generation: its own transaction (no savepoint on the hot path)
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
        super().__init__(503, state.message, type="server_error", code=code)
        self.retry_after_s = state.retry_after_s

    def response(self) -> JsonResponse:
        response = super().response()
        response["Retry-After"] = str(self.retry_after_s)
        return response


# --- completions ------------------------------------------------------------------------------


@endpoint("POST", "generate", authorize_in_view=True)
async def completions(request, caller: Caller):
    body = caller.body
    options = common_options(body)
    prompts = completion_prompts(body, options)
    return await _run(
        caller,
        body,
        prompts,
        options,
        default_max_tokens=COMPLETIONS_DEFAULT_MAX_TOKENS,
        min_max_tokens=0 if options.echo else 1,  # echo + max_tokens 0: score the prompt
    )


@endpoint("POST", "generate", authorize_in_view=True)
async def chat_completions(request, caller: Caller):
    body = caller.body
    options = common_options(body, chat=True)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise OpenAIError(400, "'messages' must be a non-empty list.", param="messages")
    turns = [message_text(m, i) for i, m in enumerate(messages)]

    def render(pipeline) -> str:
        return tokenizer_for(pipeline).chat_prompt([{"role": r, "content": c} for r, c in turns])

    max_param = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    return await _run(
        caller,
        body,
        [render],
        options,
        default_max_tokens=None,
        max_tokens_param=max_param,
        chat=True,
    )


async def _run(caller: Caller, body: dict, prompts: list, options: Options, *, chat=False, **kw):
    """ONE hop to the sync lane for the key, the pipeline, the tokenization and the rows;
    then the answer from the event loop."""

    def accept():
        caller.authorize()
        prepared, tokenizer = _prepare(
            body, prompts, chat=chat, logprobs=options.logprobs is not None, **kw
        )
        return prepared, tokenizer, _submit(prepared, options, caller.user)

    prepared, tokenizer, choices = await sync_to_async(accept)()
    job = Job(
        choices=choices,
        model=prepared[0].pipeline.name,
        chat=chat,
        options=options,
        tokenizer=tokenizer,
    )
    answer = openai_stream.response(job)
    return answer if options.stream else await answer

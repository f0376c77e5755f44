"""OpenAI-compatible endpoints under `/v1/`: models, completions, chat completions.

Async Django views (ASGI): a streaming answer is an async generator over the generation's
Redis stream, so an open stream holds no thread. Clients authenticate with a Tandem API key
as a Bearer token (`tdm_...`), exactly as they would with an OpenAI key; a model name is a
pipeline name. Every error is an OpenAI error object
`{"error": {"message", "type", "param", "code"}}` with the usual status (400, 401, 403, 404,
405, 503, 504), never an HTML page.

Finish reasons are OpenAI's: "length" when max_tokens ran out, "stop" otherwise (a stop
sequence, the end-of-sequence token, or a cancellation). If the client goes away before the
end, the generation is cancelled so its KV slots are freed on both nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from functools import wraps

from asgiref.sync import sync_to_async
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt
from redis.exceptions import RedisError

from fleet.accounts.access import can
from fleet.accounts.principal import Refused, principal_for
from fleet.guard.body_rules import InputError, load_json
from inference import services
from inference.models import Generation
from inference.serving import readiness, sse
from inference.serving.openai_format import (
    Choice,
    Job,
    OpenAIError,
    chunk,
    from_request_error,
    full_body,
    sse_data,
)
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
IDLE_TIMEOUT_S = 120.0  # no event on a generation's stream for this long -> give up
# Short blocking reads: redis-py's default socket timeout (5 s) must not cut an XREAD.
BLOCK_MS = 1000
# A silent stream writes a comment this often: how a server notices that its client left.
KEEPALIVE_S = 2.0
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
    user: object
    may_view: bool
    may_generate: bool
    body: dict = field(default_factory=dict)


def endpoint(method: str, action: str):
    """Wrap an async view: method check, Bearer auth, role check, JSON body, OpenAI errors."""

    def decorate(view: Callable):
        @csrf_exempt
        @wraps(view)
        async def wrapper(request: HttpRequest, *args, **kwargs):
            try:
                if request.method != method:
                    raise OpenAIError(
                        405, f"Method {request.method} is not allowed here; use {method}."
                    )
                user, may_view, may_generate = await sync_to_async(_principal)(request)
                allowed = may_generate if action == "generate" else may_view
                if not allowed:
                    raise OpenAIError(
                        403,
                        f"Your role does not allow this request (needs '{action}').",
                        type="permission_error",
                        code="insufficient_permissions",
                    )
                caller = Caller(user, may_view, may_generate)
                if method == "POST":
                    caller.body = _json_body(request)
                return await view(request, caller, *args, **kwargs)
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
    return body


# --- models -----------------------------------------------------------------------------------


def _model_object(pipeline) -> dict:
    return {
        "id": pipeline.name,
        "object": "model",
        "created": int(pipeline.created_at.timestamp()),
        "owned_by": "tandem",
    }


def _usable_pipelines(user) -> list:
    return [p for p in servable_pipelines() if can(user, "generate", p)]


@endpoint("GET", "view")
async def models_list(request, caller: Caller):
    """Pipelines the caller may send requests to (none for a viewer, who may not generate)."""
    pipelines = await sync_to_async(_usable_pipelines)(caller.user)
    return JsonResponse({"object": "list", "data": [_model_object(p) for p in pipelines]})


@endpoint("GET", "view")
async def model_detail(request, caller: Caller, model: str):
    pipelines = await sync_to_async(_usable_pipelines)(caller.user)
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
    _refuse_while_warming_up(pipeline)
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


def _refuse_while_warming_up(pipeline) -> None:
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


def _cancel_quietly(generation_ids) -> None:
    for generation_id in generation_ids:
        try:
            generation = Generation.objects.filter(pk=generation_id).first()
            if generation is not None and not generation.is_terminal:
                log.info("generation %s: client left or timed out; cancelling", generation_id)
                services.generation_cancel(generation=generation, actor=None)
        except Exception:  # the client is gone; nobody to tell, but keep a trace
            log.exception("could not cancel generation %s after its client left", generation_id)


# --- completions ------------------------------------------------------------------------------


@endpoint("POST", "generate")
async def completions(request, caller: Caller):
    body = caller.body
    options = common_options(body)
    prompts = completion_prompts(body, options)
    prepared, tokenizer = await sync_to_async(_prepare)(
        body,
        prompts,
        default_max_tokens=COMPLETIONS_DEFAULT_MAX_TOKENS,
        min_max_tokens=0 if options.echo else 1,  # echo + max_tokens 0: score the prompt
        logprobs=options.logprobs is not None,
    )
    return await _run(caller, prepared, tokenizer, options, chat=False)


@endpoint("POST", "generate")
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
    prepared, tokenizer = await sync_to_async(_prepare)(
        body,
        [render],
        default_max_tokens=None,
        max_tokens_param=max_param,
        chat=True,
        logprobs=options.logprobs is not None,
    )
    return await _run(caller, prepared, tokenizer, options, chat=True)


async def _run(caller: Caller, prepared, tokenizer, options: Options, *, chat: bool):
    choices = await sync_to_async(_submit)(prepared, options, caller.user)
    job = Job(
        choices=choices,
        model=prepared[0].pipeline.name,
        chat=chat,
        options=options,
        tokenizer=tokenizer,
    )
    if options.stream:
        response = StreamingHttpResponse(_sse(job), content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
    return await _complete(job)


async def _events(job: Job, *, keepalive_s: float | None = None) -> AsyncIterator[tuple]:
    """(choice number, event) of the job's generations until each is done/error, or a final
    (None, "timeout") if they all go quiet; with `keepalive_s`, (None, "keepalive") ticks
    while silent. One generation: one `follow`; several: one connection for all."""
    ids = [c.generation.id for c in job.choices]
    if len(ids) == 1:
        async for _id, event in sse.follow(
            ids[0], keepalive_s=keepalive_s, idle_timeout_s=IDLE_TIMEOUT_S, block_ms=BLOCK_MS
        ):
            yield (None if _id is None else 0), event
    else:
        async for i, event in sse.follow_many(
            ids, keepalive_s=keepalive_s, idle_timeout_s=IDLE_TIMEOUT_S, block_ms=BLOCK_MS
        ):
            yield i, event


def _error_of(event: dict) -> OpenAIError:
    if event.get("type") == "timeout":
        return OpenAIError(
            504,
            f"The generation produced nothing for {IDLE_TIMEOUT_S:g} s and was cancelled.",
            type="server_error",
            code="timeout",
        )
    return OpenAIError(
        502,
        f"The generation failed: {event.get('error') or 'unknown error'}",
        type="server_error",
        code="generation_failed",
    )


async def _cancel_left(job: Job, left: set[int]) -> None:
    if left:  # timed out, failed, or the client left (CancelledError): free their KV slots
        ids = [job.choices[i].generation.id for i in sorted(left)]
        await asyncio.shield(sync_to_async(_cancel_quietly)(ids))


async def _complete(job: Job) -> HttpResponse:
    left = set(range(len(job.choices)))
    try:
        async for i, event in _events(job):
            kind = event.get("type")
            if kind in ("error", "timeout"):
                left.discard(i)
                return _error_of(event).response()
            if i is None:
                continue
            job.choices[i].take(event)
            if kind == "done":
                left.discard(i)
        return JsonResponse(full_body(job))
    finally:
        await _cancel_left(job, left)


async def _sse(job: Job) -> AsyncIterator[bytes]:
    """`data: {chunk}` lines, then `data: [DONE]`; cancels the generations if cut short."""
    left = set(range(len(job.choices)))
    echoed: set[int] = set()
    lp = job.options.logprobs is not None
    try:
        # Headers and a first line at once, so a client (and any proxy) sees the stream open
        # while the generation waits in the queue: a chat stream's role chunk, or an SSE
        # comment, which clients ignore.
        if job.chat:
            for c in job.choices:
                yield sse_data(chunk(job, c, text="", role=True))
        else:
            yield b": started\n\n"
        async for i, event in _events(job, keepalive_s=KEEPALIVE_S):
            kind = event.get("type")
            if kind == sse.KEEPALIVE:
                yield sse.KEEPALIVE_COMMENT
                continue
            if kind in ("error", "timeout"):
                left.discard(i)
                yield sse_data(_error_of(event).body())
                break
            if i is None or kind not in ("tokens", "done"):
                continue
            c = job.choices[i]
            c.take(event)
            if job.options.echo and i not in echoed:  # the prompt first, with its logprobs
                echoed.add(i)
                entries = c.prompt_logprobs or [None] * len(c.prompt_ids)
                ids = c.prompt_ids if lp else None
                yield sse_data(chunk(job, c, text=c.prompt, tokens=ids, entries=entries))
            if kind == "tokens":
                text, tokens = event.get("text", ""), event.get("tokens") if lp else None
                if text or tokens:
                    entries = event.get("logprobs")
                    yield sse_data(chunk(job, c, text=text, tokens=tokens, entries=entries))
            else:
                left.discard(i)
                text = "" if not job.chat else None
                yield sse_data(chunk(job, c, text=text, reason=c.finish_reason))
        if not left and job.options.include_usage:
            usage = {k: v for k, v in chunk(job).items() if k != "choices"}
            yield sse_data(usage | {"choices": [], "usage": job.usage()})
        yield b"data: [DONE]\n\n"
    except Exception:  # headers are sent: end the stream with an error object, not a reset
        log.exception("stream of generation %s failed", job.generation.id)
        failure = OpenAIError(500, "The server failed while streaming.", type="server_error")
        yield sse_data(failure.body())
        yield b"data: [DONE]\n\n"
    finally:
        await _cancel_left(job, left)

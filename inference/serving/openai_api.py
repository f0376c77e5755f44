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
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import wraps

from asgiref.sync import sync_to_async
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from redis.exceptions import RedisError

from fleet.accounts.access import can
from fleet.accounts.principal import Refused, principal_for
from inference import services  # noqa: F401  (tests patch openai_api.services)
from inference.serving import openai_jobs, openai_stream
from inference.serving.openai_errors import OpenAIError
from inference.serving.openai_format import from_request_error
from inference.serving.request_rules import ModelNotFound, RequestError, servable_pipelines

log = logging.getLogger(__name__)

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
    return openai_jobs.json_body(raw)


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


# --- completions ------------------------------------------------------------------------------


@endpoint("POST", "generate", authorize_in_view=True)
async def completions(request, caller: Caller):
    return await _run(caller, openai_jobs.plan_completions(caller.body))


@endpoint("POST", "generate", authorize_in_view=True)
async def chat_completions(request, caller: Caller):
    return await _run(caller, openai_jobs.plan_chat(caller.body))


async def _run(caller: Caller, plan: openai_jobs.Plan):
    """ONE hop to the sync lane for the key, the pipeline, the tokenization and the rows;
    then the answer from the event loop. (Under ASGI a POST never gets here: the front door
    serves it, with the same `openai_jobs`.)"""
    job = await sync_to_async(openai_jobs.accept)(caller, plan)
    answer = openai_stream.response(job)
    return answer if plan.options.stream else await answer

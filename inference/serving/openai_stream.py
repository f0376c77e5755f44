"""The answer half of /v1/completions and /v1/chat/completions: a submitted job's events
from its generations' Redis streams, as one JSON body or as Server-Sent Events.

Both read `sse.follow_batches` (one generation) or `sse.follow_many_batches` (n > 1, a list
of prompts: one connection for all): every event that arrived together -- a verifier
round's tokens -- comes as one batch, and a stream writes a batch's chunks in ONE write.

If the client goes away, or the job fails or times out, the generations still running are
cancelled, so their KV slots are freed on both nodes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from json.encoder import encode_basestring_ascii

from asgiref.sync import sync_to_async
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse

from inference import services
from inference.models import Generation
from inference.serving import openai_spec, sse
from inference.serving.openai_errors import OpenAIError
from inference.serving.openai_format import Choice, Job, chunk, full_body, sse_data

log = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 120.0  # no event on a generation's stream for this long -> give up
# Short blocking reads: redis-py's default socket timeout (5 s) must not cut an XREAD.
BLOCK_MS = 1000
# A silent stream writes a comment this often: how a server notices that its client left.
KEEPALIVE_S = 2.0
DONE = b"data: [DONE]\n\n"


def response(job: Job):
    """A StreamingHttpResponse for a streaming job; else (a coroutine) the whole body."""
    if job.options.stream:
        out = StreamingHttpResponse(sse_body(job), content_type="text/event-stream")
        out["Cache-Control"] = "no-cache"
        out["X-Accel-Buffering"] = "no"
        return out
    return _complete(job)


async def _events(job: Job, *, keepalive_s: float | None = None) -> AsyncIterator[list[tuple]]:
    """Batches of (choice number, event) of the job's generations until each is done/error,
    or a final (None, "timeout") if they all go quiet; with `keepalive_s`, (None,
    "keepalive") ticks while silent."""
    ids = [c.generation.id for c in job.choices]
    owners = [c.generation.verifier_id for c in job.choices]  # where their streams are
    if len(ids) == 1:
        async for one in sse.follow_batches(
            ids[0],
            owner=owners[0],
            keepalive_s=keepalive_s,
            idle_timeout_s=IDLE_TIMEOUT_S,
            block_ms=BLOCK_MS,
        ):
            yield [(None if entry_id is None else 0, event) for entry_id, event in one]
    else:
        async for many in sse.follow_many_batches(
            ids,
            owners=owners,
            keepalive_s=keepalive_s,
            idle_timeout_s=IDLE_TIMEOUT_S,
            block_ms=BLOCK_MS,
        ):
            yield many


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


def _cancel_quietly(generation_ids) -> None:
    for generation_id in generation_ids:
        try:
            generation = Generation.objects.filter(pk=generation_id).first()
            if generation is not None and not generation.is_terminal:
                log.info("generation %s: client left or timed out; cancelling", generation_id)
                services.generation_cancel(generation=generation, actor=None)
        except Exception:  # the client is gone; nobody to tell, but keep a trace
            log.exception("could not cancel generation %s after its client left", generation_id)


async def _cancel_left(job: Job, left: set[int]) -> None:
    if left:  # timed out, failed, or the client left (CancelledError): free their KV slots
        ids = [job.choices[i].generation.id for i in sorted(left)]
        await asyncio.shield(sync_to_async(_cancel_quietly)(ids))


async def complete(job: Job) -> dict:
    """The whole body of a job that does not stream; OpenAIError if it failed or timed out."""
    left = set(range(len(job.choices)))
    try:
        async for batch in _events(job):
            for i, event in batch:
                kind = event.get("type")
                if kind in ("error", "timeout"):
                    left.discard(i)
                    raise _error_of(event)
                if i is None:
                    continue
                job.choices[i].take(event)
                if kind == "done":
                    left.discard(i)
        return full_body(job)
    finally:
        await _cancel_left(job, left)


async def _complete(job: Job) -> HttpResponse:
    try:
        return JsonResponse(await complete(job))
    except OpenAIError as exc:
        return exc.response()


_MARK = "\ue000tandem-text\ue000"  # stands for a chunk's text in a pre-encoded template


def _template(job: Job, c: Choice) -> tuple[bytes, bytes]:
    """The bytes of choice `c`'s text chunk before and after its JSON-encoded text: built once
    by `chunk` itself (so the wire format is exactly `chunk`'s), then only the text varies."""
    sent = c.sent_chars
    line = sse_data(chunk(job, c, text=_MARK))
    c.sent_chars = sent
    before, after = line.split(encode_basestring_ascii(_MARK).encode(), 1)
    return before, after


class _Writer:
    """The chunks of one batch of events, for the job's stream. Without logprobs, a choice's
    tokens events that arrived together become ONE chunk, written from a template encoded
    once per choice (only the text is encoded per chunk)."""

    def __init__(self, job: Job):
        self.job = job
        self.left = set(range(len(job.choices)))
        self.echoed: set[int] = set()
        self.logprobs = job.options.logprobs is not None
        self.failed = False
        self.templates: dict[int, tuple[bytes, bytes]] = {}

    def _text_chunk(self, i: int, text: str) -> bytes:
        c = self.job.choices[i]
        template = self.templates.get(i)
        if template is None:
            template = self.templates[i] = _template(self.job, c)
        c.sent_chars += len(text)
        return template[0] + encode_basestring_ascii(text).encode() + template[1]

    def chunks(self, batch: list[tuple]) -> list[bytes]:
        out: list[bytes] = []
        job = self.job
        run_of: int | None = None  # the choice whose texts are pending (no logprobs)
        run: list[str] = []
        for i, event in batch:
            kind = event.get("type")
            if run and (i != run_of or kind != "tokens" or self.logprobs):
                out.append(self._text_chunk(run_of, "".join(run)))  # type: ignore[arg-type]
                run.clear()
            if kind == sse.KEEPALIVE:
                out.append(sse.KEEPALIVE_COMMENT)
                continue
            if kind in ("error", "timeout"):
                self.left.discard(i)
                out.append(sse_data(_error_of(event).body()))
                self.failed = True
                return out
            if i is None or kind not in ("tokens", "done"):
                continue
            c = job.choices[i]
            c.take(event)
            if job.options.echo and i not in self.echoed:  # the prompt first, with its logprobs
                self.echoed.add(i)
                entries = c.prompt_logprobs or [None] * len(c.prompt_ids)
                ids = c.prompt_ids if self.logprobs else None
                out.append(sse_data(chunk(job, c, text=c.prompt, tokens=ids, entries=entries)))
            if kind == "tokens":
                text = event.get("text", "")
                if not self.logprobs:
                    if text:
                        run_of = i
                        run.append(text)
                    continue
                tokens = event.get("tokens")
                if text or tokens:
                    entries = event.get("logprobs")
                    out.append(sse_data(chunk(job, c, text=text, tokens=tokens, entries=entries)))
            else:
                self.left.discard(i)
                text = "" if not job.chat else None
                last = chunk(job, c, text=text, reason=c.finish_reason)
                if job.options.spec_metrics and not self.left and not job.options.include_usage:
                    last["metrics"] = openai_spec.metrics(job.choices)  # on the final chunk
                out.append(sse_data(last))
        if run:
            out.append(self._text_chunk(run_of, "".join(run)))  # type: ignore[arg-type]
        return out


async def sse_body(job: Job) -> AsyncGenerator[bytes]:
    """`data: {chunk}` lines, then `data: [DONE]`; cancels the generations if cut short."""
    writer = _Writer(job)
    try:
        # Headers and a first line at once, so a client (and any proxy) sees the stream open
        # while the generation waits in the queue: a chat stream's role chunk, or an SSE
        # comment, which clients ignore.
        if job.chat:
            yield b"".join(sse_data(chunk(job, c, text="", role=True)) for c in job.choices)
        else:
            yield b": started\n\n"
        async for batch in _events(job, keepalive_s=KEEPALIVE_S):
            out = writer.chunks(batch)
            if writer.failed:
                yield b"".join(out)
                break
            if not writer.left and job.options.include_usage:
                usage = {k: v for k, v in chunk(job).items() if k != "choices"}
                usage |= {"choices": [], "usage": job.usage()}
                if job.options.spec_metrics:
                    usage["metrics"] = openai_spec.metrics(job.choices)
                out.append(sse_data(usage))
            if not writer.left:
                out.append(DONE)
                yield b"".join(out)
                return
            if out:
                yield b"".join(out)
        yield DONE
    except Exception:  # headers are sent: end the stream with an error object, not a reset
        log.exception("stream of generation %s failed", job.generation.id)
        failure = OpenAIError(500, "The server failed while streaming.", type="server_error")
        yield sse_data(failure.body()) + DONE
    finally:
        await _cancel_left(job, writer.left)

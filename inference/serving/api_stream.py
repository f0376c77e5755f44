"""`GET /api/v1/generations/<id>/stream`: one generation's events as Server-Sent Events.

Async: an open stream holds no thread. Its checks (key or session, "view", the generation's
owner or a content grant) take one hop to the read lane (fleet/runtime/web_handler.py), which does
not queue behind the submits; then it writes every batch of
events that arrived together (a verifier round's tokens) in one chunk.
"""

from __future__ import annotations

import json
import logging

from asgiref.sync import sync_to_async
from django.db import connection
from django.http import JsonResponse, StreamingHttpResponse

from fleet import redis_clients
from fleet.accounts.access import can
from fleet.accounts.principal import Refused, principal_for
from fleet.raw_models import raw_instances
from fleet.runtime.web_handler import read_lane
from inference import wire
from inference.models import Generation
from inference.serving import sse

log = logging.getLogger(__name__)

STREAM_IDLE_TIMEOUT_S = 120.0


def _stream_refusal(request, generation_id) -> JsonResponse | Generation:
    """Authentication, permission and existence checks of a stream request, in one hop to
    the sync thread (which every POST shares): the generation (its id, owner and verifier)
    when the stream may be served."""
    try:
        user = principal_for(request)  # an API key, or the session's user
    except Refused as refused:
        return refused.response()
    if not can(user, "view"):
        return JsonResponse(
            {"detail": "You do not have permission to perform this action."}, status=403
        )
    generation = _owner_of(generation_id)
    if generation is None:
        return JsonResponse({"detail": "No Generation matches the given query."}, status=404)
    if not can(user, "read_content", generation):
        return JsonResponse(
            {
                "detail": "Only the generation's owner or a user granted content access may "
                "read its text."
            },
            status=403,
        )
    return generation


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _ended_by(generation_id, owner: int | None, last_id: str) -> bool:
    """Whether the stream's terminal event (under `owner`, the verifier the ledger names) is
    at or before `last_id`: a client resuming after the end (or past it) has nothing left to
    wait for. Sync (one XREVRANGE)."""
    if last_id in ("0", "0-0") or owner is None:
        return False
    key = wire.stream_key(owner, generation_id)
    last: list = redis_clients.client().xrevrange(key, count=1)  # type: ignore[assignment]
    if not last:
        return False
    entry_id, fields = last[0]
    event = wire.decode_event(fields)
    return event.get("type") in wire.TERMINAL_TYPES and _id_key(
        wire.decode_id(entry_id)
    ) <= _id_key(last_id)


def _owner_of(generation_id) -> Generation | None:
    """The generation with only its id, owner and verifier (all a stream's checks and its
    read need): raw SQL, on the path of every stream."""
    table = Generation._meta.db_table
    rows = raw_instances(
        Generation,
        f"SELECT id, user_id, verifier_id FROM {table} WHERE id = %s",
        [Generation._meta.pk.get_db_prep_value(generation_id, connection)],
    )
    return rows[0] if rows else None


def _sse_event(entry_id: str, event: dict) -> bytes:
    payload = json.dumps(event, separators=(",", ":"))
    return f"id: {entry_id}\nevent: {event.get('type', 'message')}\ndata: {payload}\n\n".encode()


async def generation_stream(request, generation_id):
    """`GET /api/v1/generations/<id>/stream`: the generation's events as SSE (`event:` is the
    event type, `id:` its stream id; send `Last-Event-ID` to resume). Ends after done/error."""
    if request.method != "GET":
        return JsonResponse({"detail": f'Method "{request.method}" not allowed.'}, status=405)
    # on the read lane: a stream's checks do not queue behind the submits
    lane = read_lane()
    check = sync_to_async(_stream_refusal, thread_sensitive=lane is None, executor=lane)
    generation = await check(request, generation_id)
    if isinstance(generation, JsonResponse):
        return generation
    last_id = request.headers.get("Last-Event-ID") or "0"
    if not wire.is_entry_id(last_id):
        return JsonResponse(
            {"Last-Event-ID": ["Give an event id this stream sent (e.g. 1700000000000-0)."]},
            status=400,
        )

    ended = await sync_to_async(_ended_by, thread_sensitive=lane is None, executor=lane)(
        generation_id, generation.verifier_id, last_id
    )

    async def events():
        if ended:  # resumed at or past the end of a finished stream: it ends now
            return
        try:  # every event that arrived together in one chunk: one write per round
            async for batch in sse.follow_batches(
                generation_id,
                owner=generation.verifier_id,  # the ledger's owner: its stream only
                last_id=last_id,
                idle_timeout_s=STREAM_IDLE_TIMEOUT_S,
            ):
                chunk = b"".join(
                    _sse_event(entry_id, event)
                    if entry_id is not None
                    # a keep-alive tick, or the end of a stream gone quiet
                    else (sse.KEEPALIVE_COMMENT if event["type"] == sse.KEEPALIVE else b"")
                    for entry_id, event in batch
                )
                if chunk:
                    yield chunk
        except Exception:  # headers are sent: end with an error event, never a silent cut
            log.exception("stream of generation %s failed", generation_id)
            failure = {"type": "error", "error": "The server failed while streaming."}
            yield f"event: error\ndata: {json.dumps(failure)}\n\n".encode()

    response = StreamingHttpResponse(events(), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response

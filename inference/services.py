"""Every state change of a generation: keyword-only, atomic, messages to workers after commit.

Web side: `generation_submit`, `generation_cancel`, `push_pipeline_config`.
Node side, applied by the ledger consumer (`inference.ledger`) from the verifier's signed
reports: `inference.report_services`.
Control worker: `generations_watchdog` (deadlines, lost nodes -> re-route or fail; a lost
drafter whose verifier is healthy -> `generation_degrade`: the verifier finishes plainly).
Supervisor of `manage.py up`: `node_process_gone` (a local node worker died: the same
re-route, at once rather than after the heartbeat window).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import redis
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from fleet.nodes.choices import NodeState
from fleet.nodes.models import Node
from fleet.pipelines.models import Pipeline
from fleet.raw_models import insert_instance
from inference import wire
from inference.learning.selectors import canary_of
from inference.models import Generation, GenerationState
from inference.router import NoCapacity, needs_drafter, pick_pair
from inference.selectors import generations_active
from inference.start_messages import start_after_commit

__all__ = [
    "NoCapacity",
    "generation_submit",
    "generation_cancel",
    "push_pipeline_config",
    "generations_watchdog",
    "node_process_gone",
]

logger = logging.getLogger(__name__)

DEFAULT_DEADLINE_S = 600  # a generation still active this long after submit fails
MAX_ATTEMPTS = 3  # first run + two re-routes


def _locked(generation: Generation) -> Generation:
    return Generation.objects.select_for_update().get(pk=generation.pk)


def start_payload(generation: Generation) -> dict:
    return {
        "gen": str(generation.pk),
        "attempt": generation.attempts,
        "pipeline": generation.pipeline_id,
        "prompt_tokens": list(generation.prompt_tokens),
        "params": dict(generation.params),
        "drafter": generation.drafter_id,
        # the pipeline drafts but no healthy drafter was left: the verifier counts it
        "degraded": generation.drafter_id is None and needs_drafter(generation.pipeline),
        "created": generation.created_at.timestamp(),
    }


def db_text(text: str) -> str:
    """Text as every database can store it: PostgreSQL refuses NUL characters, which a
    byte-level model may well generate. The exact output stays in `output_tokens`."""
    return text.replace("\x00", "\ufffd")


def generation_submit(
    *, pipeline: Pipeline, prompt: str, prompt_tokens: list[int], params: dict, user
) -> Generation:
    """Write the row (queued) with its drafter and verifier; the verifier starts it after
    commit. Raises NoCapacity when the pipeline has no healthy pair.

    No transaction of its own: the row is ONE statement (an INSERT), atomic by itself in
    autocommit -- a BEGIN and a COMMIT around it cost the web process two more round trips
    (and SQLite's write lock for longer) on every request. Called inside a transaction (a
    request with several rows), it commits with it, and the start messages leave after."""
    pair = pick_pair(pipeline)
    now = timezone.now()
    timeout_s = params.get("timeout_s") or DEFAULT_DEADLINE_S
    generation = Generation(
        pipeline=pipeline,
        user=user if getattr(user, "pk", None) else None,
        prompt=db_text(prompt),
        prompt_tokens=list(prompt_tokens),
        params=dict(params),
        drafter=pair.drafter,
        verifier=pair.verifier,
        attempts=1,
        created_at=now,
        deadline=now + timedelta(seconds=float(timeout_s)),
    )
    insert_instance(generation)  # ONE statement
    start_after_commit(generation.pk, pair.verifier.pk, start_payload(generation))
    return generation


def _completion_tokens(generation_id, verifier_id: int | None) -> int:
    try:
        return sum(
            len(e.get("tokens", []))
            for _, e in wire.read_all(generation_id, node=verifier_id)
            if e.get("type") == "tokens"
        )
    except Exception:  # the stream is best effort here; the row is the record
        return 0


def _streamed(generation: Generation) -> tuple[list[int], str]:
    """The tokens and text streamed to the client so far (all attempts, under the verifier
    the row names); best effort: Redis away leaves them empty."""
    try:
        events = wire.read_all(generation.pk, node=generation.verifier_id)
        tokens = [t for _, e in events if e.get("type") == "tokens" for t in e.get("tokens", [])]
        return tokens, wire.collect_text(events)
    except (redis.RedisError, OSError):  # the stream is best effort here; the row is the record
        return [], ""


def end_generation(
    generation: Generation, *, state: str, finish_reason: str, error: str = ""
) -> None:
    """Terminal move of a locked, active row; after commit, both nodes free the sequence
    and the stream gets its terminal event (so a follower ends even if a worker is gone).
    A failed or cancelled row keeps what was streamed before it ended (its usage)."""
    generation.check_transition(state)
    generation.state = state
    generation.finish_reason = finish_reason
    generation.error = db_text(error)
    generation.finished_at = timezone.now()
    fields = ["state", "finish_reason", "error", "finished_at"]
    if not generation.output_tokens:
        tokens, text = _streamed(generation)
        if tokens:
            generation.output_tokens, generation.output_text = tokens, db_text(text)
            fields += ["output_tokens", "output_text"]
    generation.save(update_fields=fields)
    gid, prompt_n = generation.pk, len(generation.prompt_tokens)
    node_ids = [n for n in (generation.drafter_id, generation.verifier_id) if n]
    owner = generation.verifier_id  # its stream lives under its verifier (wire)

    def after():
        for node_id in node_ids:
            wire.send(node_id, "cancel", {"gen": str(gid)})
        if owner is None:
            return
        if error:
            wire.publish(gid, wire.error_event(error), node=owner)
        else:
            done = wire.done_event(finish_reason, prompt_n, _completion_tokens(gid, owner))
            wire.publish(gid, done, node=owner)

    transaction.on_commit(after)


@transaction.atomic
def generation_cancel(*, generation: Generation, actor=None) -> Generation:
    """Cancel; idempotent for terminal generations. Frees the KV slots on both nodes."""
    generation = _locked(generation)
    if generation.is_terminal:
        return generation
    end_generation(generation, state=GenerationState.CANCELLED, finish_reason="cancelled")
    return generation


@transaction.atomic
def generation_fail(
    *, generation: Generation, error: str, finish_reason: str = "error"
) -> Generation:
    generation = _locked(generation)
    if generation.is_terminal:
        return generation
    end_generation(
        generation, state=GenerationState.FAILED, finish_reason=finish_reason, error=error
    )
    return generation


def worker_config(pipeline: Pipeline) -> dict:
    """The configuration a worker of the pipeline runs by: the pipeline's, and the canary of
    a candidate draft when one is canaried (`inference.learning`)."""
    return {**pipeline.config(), "canary": canary_of(pipeline)}


def push_pipeline_config(pipeline: Pipeline, *, node_ids: list[int] | None = None) -> None:
    """Send the pipeline's current configuration to every placed node's worker (or to those
    of `node_ids` still placed in it); workers apply it between rounds. Call after commit.
    In-flight sequences keep going."""
    everyone = list(pipeline.placements.values_list("node_id", flat=True))
    payload = {
        "pipeline": pipeline.pk,
        "version": pipeline.version,
        "config": worker_config(pipeline),
        "peers": sorted(everyone),  # whom its nodes exchange round messages with (wire)
    }
    targets = everyone if node_ids is None else [n for n in everyone if n in set(node_ids)]
    wire.send_many(targets, "config", payload)


# --- control worker: deadlines and lost nodes -------------------------------------------------

UNHEALTHY = (NodeState.LOST, NodeState.RETIRED)


MAX_ROUTE_EVENTS = 16  # a generation is re-routed at most MAX_ATTEMPTS times


def _route_event(generation: Generation, kind: str, *, reason: str) -> None:
    """Note on the row what happened to the attempt it is leaving (its timeline)."""
    events = list(generation.route_events or [])[-MAX_ROUTE_EVENTS + 1 :]
    events.append(
        {
            "at": timezone.now().isoformat(),
            "kind": kind,
            "attempt": generation.attempts,
            "drafter": generation.drafter_id,
            "verifier": generation.verifier_id,
            "reason": reason[:200],
        }
    )
    generation.route_events = events


@transaction.atomic
def generation_reroute(
    *, generation: Generation, reason: str, attempt: int | None = None
) -> Generation:
    """Move an active generation to a healthy pair; it resumes from the tokens already
    streamed (the new verifier re-prefills prompt + those tokens). Fails it with a clear
    reason when no pair is left or it was re-routed too often.

    `attempt`: the attempt the caller found on a bad node. If the row has moved on since
    (another re-router -- the watchdog, the supervisor -- got there first), nothing happens."""
    generation = _locked(generation)
    if generation.is_terminal or (attempt is not None and generation.attempts != attempt):
        return generation
    old = {n for n in (generation.drafter_id, generation.verifier_id) if n}
    bad = (
        set(Node.objects.filter(pk__in=old, state__in=UNHEALTHY).values_list("pk", flat=True))
        or old
    )
    if generation.attempts >= MAX_ATTEMPTS:
        end_generation(
            generation,
            state=GenerationState.FAILED,
            finish_reason="error",
            error=f"{reason}; gave up after {generation.attempts} attempts",
        )
        return generation
    try:
        pair = pick_pair(generation.pipeline, exclude=bad)
    except NoCapacity as exc:
        end_generation(
            generation,
            state=GenerationState.FAILED,
            finish_reason="error",
            error=f"{reason}; {exc}",
        )
        return generation
    if generation.state != GenerationState.QUEUED:
        generation.check_transition(GenerationState.QUEUED)
        generation.state = GenerationState.QUEUED
    old_attempt, old_verifier = generation.attempts, generation.verifier_id
    _route_event(generation, "rerouted", reason=reason)
    generation.drafter, generation.verifier = pair.drafter, pair.verifier
    generation.attempts += 1
    generation.save(update_fields=["state", "drafter", "verifier", "attempts", "route_events"])
    payload = start_payload(generation)
    gid, verifier_id = generation.pk, pair.verifier.pk

    def after():
        # the stream moves under the new verifier; it resumes from what was streamed
        moved = wire.move_stream(gid, old=old_verifier, new=verifier_id, reason=reason)
        payload["resume"] = [e for _, e in moved if e.get("type") == "tokens"]
        for node_id in old:  # the old attempt ends there (a live node frees its slots)
            wire.send(node_id, "cancel", {"gen": str(gid), "attempt": old_attempt})
        wire.send(verifier_id, "start", payload)

    transaction.on_commit(after)
    return generation


@transaction.atomic
def generation_degrade(*, generation: Generation, attempt: int | None = None) -> bool:
    """Its drafter is gone, its verifier is not: the verifier finishes it by plain decoding
    (k=0) from where it is -- same attempt, nothing re-prefilled, nothing resent. The row
    forgets the drafter; after commit the verifier hears `drafter_lost` (it degrades all its
    sequences of that drafter and counts them in its telemetry). Nothing happens to a row
    that ended, moved on since `attempt`, or has no drafter (False)."""
    generation = _locked(generation)
    moved = attempt is not None and generation.attempts != attempt
    lost, verifier_id = generation.drafter_id, generation.verifier_id
    if generation.is_terminal or moved or lost is None or verifier_id is None:
        return False
    _route_event(generation, "degraded", reason="its drafter was lost: plain decoding")
    generation.drafter = None
    generation.save(update_fields=["drafter", "route_events"])
    transaction.on_commit(lambda: wire.send(verifier_id, "drafter_lost", {"drafter": lost}))
    return True


def generations_watchdog(*, now: datetime | None = None) -> dict:
    """One pass: mark nodes lost by heartbeat age, fail generations past their deadline,
    re-route (or fail) generations held by a lost or retired node. Idempotent."""
    from fleet.nodes.services import nodes_mark_lost

    now = now or timezone.now()
    lost = nodes_mark_lost(now=now)
    report: dict[str, list] = {"nodes_lost": lost}
    report |= {"timed_out": [], "rerouted": [], "degraded": [], "failed": []}
    for g in generations_active().filter(deadline__lt=now):
        generation_fail(generation=g, error="deadline exceeded", finish_reason="timeout")
        report["timed_out"].append(str(g.pk))
    stranded = generations_active().filter(
        Q(verifier__state__in=UNHEALTHY) | Q(drafter__state__in=UNHEALTHY)
    )
    _reroute_all(stranded, report)
    if any(report.values()):
        logger.info("watchdog: %s", report)
    return report


def _reroute_all(generations, report: dict, *, why: str = "") -> None:
    """Re-route (or fail) each generation, naming its unhealthy node(s) and `why`; one whose
    only unhealthy node is its drafter is degraded instead (its verifier finishes it)."""
    for g in generations.select_related("drafter", "verifier").distinct():
        bad = [n for n in (g.drafter, g.verifier) if n is not None and n.state in UNHEALTHY]
        if bad and bad == [g.drafter]:
            if generation_degrade(generation=g, attempt=g.attempts):
                report["degraded"].append(str(g.pk))
            continue
        reason = ", ".join(
            f"{n.name} ({'drafter' if n == g.drafter else 'verifier'}) is {n.state}" for n in bad
        )
        reason = f"{reason}: {why}" if why and reason else reason or why
        seen = g.attempts
        g = generation_reroute(generation=g, reason=reason, attempt=seen)
        if g.attempts > seen:
            report["rerouted"].append(str(g.pk))
        elif g.state == GenerationState.FAILED:
            report["failed"].append(str(g.pk))


def node_process_gone(*, node_ref: str, reason: str) -> dict:
    """A node worker's process is gone, and the supervisor that ran it knows (it saw it
    exit, or found it not running at start): the node is lost now, its pending round
    messages are dropped (a restarted worker must not replay them), and every active
    generation it held moves to a healthy pair or ends with an error event -- or, when it
    was only the drafter, is finished by its verifier alone (degraded). Idempotent;
    a node that does not exist (yet) has nothing to release."""
    from fleet.nodes.services import node_mark_lost

    report: dict = {"rerouted": [], "degraded": [], "failed": []}
    lookup = {"pk": int(node_ref)} if str(node_ref).isdigit() else {"name": node_ref}
    node = Node.objects.filter(**lookup).first()
    if node is None:
        return report
    node = node_mark_lost(node=node)
    wire.discard_rounds(node.pk)
    held = generations_active().filter(Q(verifier=node) | Q(drafter=node))
    _reroute_all(held, report, why=reason)
    if any(report.values()):
        logger.warning("node %s: %s; %s", node.name, reason, report)
    return report

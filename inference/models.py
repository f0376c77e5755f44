"""Generation: one inference request, its state, tokens, timings and speculation counters."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone


class GenerationState(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_STATES = frozenset(
    {GenerationState.FINISHED, GenerationState.FAILED, GenerationState.CANCELLED}
)

# The one table of legal moves. running -> queued is a re-route after a node was lost.
TRANSITIONS: dict[str, set[str]] = {
    GenerationState.QUEUED: {
        GenerationState.RUNNING,
        GenerationState.FAILED,
        GenerationState.CANCELLED,
    },
    GenerationState.RUNNING: {
        GenerationState.QUEUED,
        GenerationState.FINISHED,
        GenerationState.FAILED,
        GenerationState.CANCELLED,
    },
}


class IllegalTransition(Exception):
    pass


class Generation(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    pipeline = models.ForeignKey(
        "pipelines.Pipeline", on_delete=models.PROTECT, related_name="generations"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    prompt = models.TextField(blank=True)
    prompt_tokens = models.JSONField(default=list)
    # temperature, top_k, top_p, seed, max_tokens, stop (list of strings)
    params = models.JSONField(default=dict)
    state = models.CharField(
        max_length=10,
        choices=GenerationState.choices,
        default=GenerationState.QUEUED,
        db_index=True,
    )
    finish_reason = models.CharField(
        max_length=20, blank=True
    )  # stop | length | eos | cancelled | error
    error = models.TextField(blank=True)
    output_tokens = models.JSONField(default=list)
    output_text = models.TextField(blank=True)
    drafter = models.ForeignKey(
        "nodes.Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="drafting"
    )
    verifier = models.ForeignKey(
        "nodes.Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="verifying"
    )
    attempts = models.PositiveSmallIntegerField(default=0)  # > 1 after a re-route
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    first_token_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    deadline = models.DateTimeField(null=True, blank=True)
    # inter-token latency summary (ms): {"p50": .., "p99": .., "mean": .., "n": ..}
    itl_ms = models.JSONField(default=dict, blank=True)
    # vLLM-named counters: num_drafts, num_draft_tokens, num_accepted_tokens,
    # num_accepted_tokens_per_pos
    counters = models.JSONField(default=dict, blank=True)
    # The request's timeline (inference.timeline): the last attempt's verify rounds as its
    # verifier logged them (inference.worker.round_log), and the control plane's re-routes
    # and degrades of earlier attempts ({"at", "kind", "attempt", "drafter", "verifier", ...}).
    rounds = models.JSONField(default=dict, blank=True)
    route_events = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["pipeline", "state"])]

    def __str__(self) -> str:
        return f"generation {self.id} ({self.state})"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def check_transition(self, to: str) -> None:
        if to not in TRANSITIONS.get(self.state, set()):
            raise IllegalTransition(f"generation {self.id} cannot go from {self.state} to {to}")

    @property
    def queue_ms(self) -> float | None:
        if self.started_at is None:
            return None
        return (self.started_at - self.created_at).total_seconds() * 1000

    @property
    def ttft_ms(self) -> float | None:
        if self.first_token_at is None:
            return None
        return (self.first_token_at - self.created_at).total_seconds() * 1000

    @property
    def total_ms(self) -> float | None:
        if self.finished_at is None:
            return None
        return (self.finished_at - self.created_at).total_seconds() * 1000

    @property
    def acceptance(self) -> float | None:
        """Accepted draft tokens over drafted ones (its counters; None without drafts)."""
        c = self.counters or {}
        drafted = c.get("num_draft_tokens") or 0
        return (c.get("num_accepted_tokens") or 0) / drafted if drafted else None


# Learning from traffic (its own module; imported here so Django finds its models).
from inference.learning.models import (  # noqa: E402, F401
    CapturedPair,
    DraftVersion,
    LearningPolicy,
)

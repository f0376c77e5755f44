"""Rows of learning from traffic: the operator's policy per pipeline, the captured pairs,
and the draft versions with their states (one transition table)."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone


class LearningPolicy(models.Model):
    """Off by default. `captured_until`: generations finished before it were looked at."""

    pipeline = models.OneToOneField(
        "pipelines.Pipeline", on_delete=models.CASCADE, related_name="learning"
    )
    enabled = models.BooleanField(default=False)
    retention_hours = models.PositiveIntegerField(
        default=72, validators=[MinValueValidator(1), MaxValueValidator(24 * 365)]
    )
    min_pairs = models.PositiveIntegerField(  # new pairs before the next training
        default=32, validators=[MinValueValidator(1), MaxValueValidator(100_000)]
    )
    max_pairs = models.PositiveIntegerField(  # the most recent pairs a training reads
        default=512, validators=[MinValueValidator(1), MaxValueValidator(100_000)]
    )
    train_minutes = models.FloatField(
        default=3.0, validators=[MinValueValidator(0.05), MaxValueValidator(120)]
    )
    canary_fraction = models.FloatField(
        default=0.2, validators=[MinValueValidator(0.01), MaxValueValidator(0.5)]
    )
    promote_margin = models.FloatField(  # relative acceptance gain a candidate must show
        default=0.05, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)]
    )
    min_canary_tokens = models.PositiveIntegerField(  # draft tokens per arm before judging
        default=2000, validators=[MinValueValidator(1), MaxValueValidator(10_000_000)]
    )
    captured_until = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"learning of pipeline {self.pipeline_id} ({'on' if self.enabled else 'off'})"


class CapturedPair(models.Model):
    """A prompt and the target's output for it: generation content, read under the same
    rule (`user` is the generation's owner)."""

    pipeline = models.ForeignKey(
        "pipelines.Pipeline", on_delete=models.CASCADE, related_name="captured_pairs"
    )
    generation = models.OneToOneField(
        "inference.Generation", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    prompt_tokens = models.JSONField(default=list)
    output_tokens = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"pair {self.pk} of pipeline {self.pipeline_id}"


class DraftStatus(models.TextChoices):
    TRAINING = "training"
    FAILED = "failed"  # the training failed: nothing was served
    CANDIDATE = "candidate"  # trained, canaried on a share of sequences
    PROMOTED = "promoted"  # serving every sequence
    REJECTED = "rejected"  # lost its canary
    ROLLED_BACK = "rolled_back"  # promoted, then regressed
    RETIRED = "retired"  # promoted, then superseded by a newer promoted version


TERMINAL = frozenset(
    {DraftStatus.FAILED, DraftStatus.REJECTED, DraftStatus.ROLLED_BACK, DraftStatus.RETIRED}
)
TRANSITIONS: dict[str, set[str]] = {
    DraftStatus.TRAINING: {DraftStatus.CANDIDATE, DraftStatus.FAILED},
    DraftStatus.CANDIDATE: {DraftStatus.PROMOTED, DraftStatus.REJECTED},
    DraftStatus.PROMOTED: {DraftStatus.ROLLED_BACK, DraftStatus.RETIRED},
    DraftStatus.RETIRED: {DraftStatus.PROMOTED},  # its successor rolled back: it serves again
}


class IllegalDraftTransition(Exception):
    pass


class DraftVersion(models.Model):
    """A draft trained on the pipeline's traffic. `path`: its model directory (a reference
    as `Pipeline.draft_model` takes it). Acceptance figures are tokens accepted / drafted:
    `heldout_*` measured offline on held-out pairs, `canary_*` served (candidate vs the
    serving draft, same window), `served_acceptance` after promotion."""

    pipeline = models.ForeignKey(
        "pipelines.Pipeline", on_delete=models.CASCADE, related_name="draft_versions"
    )
    number = models.PositiveIntegerField()
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    path = models.CharField(max_length=300, blank=True)
    status = models.CharField(
        max_length=12, choices=DraftStatus.choices, default=DraftStatus.TRAINING, db_index=True
    )
    created_at = models.DateTimeField(default=timezone.now)
    decided_at = models.DateTimeField(null=True, blank=True)
    train_pairs = models.PositiveIntegerField(default=0)
    heldout_agreement_before = models.FloatField(null=True, blank=True)
    heldout_agreement = models.FloatField(null=True, blank=True)
    canary_acceptance = models.FloatField(null=True, blank=True)
    baseline_acceptance = models.FloatField(null=True, blank=True)
    canary_goodput_tps = models.FloatField(null=True, blank=True)
    baseline_goodput_tps = models.FloatField(null=True, blank=True)
    served_acceptance = models.FloatField(null=True, blank=True)
    # what served before it (drafter kind, draft model): where a rollback goes back to
    previous = models.JSONField(default=dict, blank=True)
    detail = models.JSONField(default=dict, blank=True)  # training manifest, error, figures
    task_id = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-number"]
        constraints = [
            models.UniqueConstraint(fields=["pipeline", "number"], name="unique_draft_version")
        ]

    def __str__(self) -> str:
        return f"draft v{self.number} of pipeline {self.pipeline_id} ({self.status})"

    def check_transition(self, to: str) -> None:
        if to not in TRANSITIONS.get(self.status, set()):
            raise IllegalDraftTransition(f"draft v{self.number} cannot go {self.status} -> {to}")

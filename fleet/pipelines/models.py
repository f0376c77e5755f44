"""Pipelines: a target model verified on GPU nodes, fed by drafter nodes; their placements,
configuration history and the outbox of configuration pushes (the audit log: `fleet.audit`)."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone


class DrafterKind(models.TextChoices):
    MODEL = "model", "draft model"
    NGRAM = "ngram", "n-gram prompt lookup"
    NONE = "none", "none (plain decoding)"


class PlacementRole(models.TextChoices):
    DRAFT = "draft", "drafter"
    VERIFY = "verify", "verifier"


# Fields that make up a pipeline's configuration: what a revision snapshots and a rollback
# restores. Keep in one place so the audit log, rollback and workers agree.
CONFIG_FIELDS = (
    "target_model",
    "drafter_kind",
    "draft_model",
    "k_policy",
    "max_verify_batch",
    "max_batch_wait_ms",
    "slo_itl_p99_ms",
    "slo_ttft_p99_ms",
    "power_budget_w",
    "auto_mode",
    "auto_bounds",
)


def default_k_policy() -> dict:
    return {"mode": "fixed", "k": 4}


class Pipeline(models.Model):
    """`name` is also the model name clients use on the OpenAI-compatible API."""

    name = models.SlugField(max_length=64, unique=True)
    description = models.CharField(max_length=200, blank=True)
    # Model references: a directory name under DATA_DIR/models, or an absolute path.
    target_model = models.CharField(max_length=300)
    drafter_kind = models.CharField(
        max_length=10, choices=DrafterKind.choices, default=DrafterKind.MODEL
    )
    draft_model = models.CharField(max_length=300, blank=True)
    # {"mode": "fixed", "k": 4} | {"mode": "table", "table": [[max_batch, k], ...]}
    # | {"mode": "adaptive", "k_min": 0, "k_max": 8}
    k_policy = models.JSONField(default=default_k_policy)
    max_verify_batch = models.PositiveIntegerField(
        default=32, validators=[MinValueValidator(1), MaxValueValidator(1024)]
    )
    max_batch_wait_ms = models.PositiveIntegerField(default=5, validators=[MaxValueValidator(1000)])
    slo_itl_p99_ms = models.FloatField(null=True, blank=True)
    slo_ttft_p99_ms = models.FloatField(null=True, blank=True)
    power_budget_w = models.FloatField(null=True, blank=True)
    auto_mode = models.BooleanField(default=False)
    auto_bounds = models.JSONField(default=dict, blank=True)
    simulated = models.BooleanField(default=False)
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def config(self) -> dict:
        return {field: getattr(self, field) for field in CONFIG_FIELDS}


class Placement(models.Model):
    """A node serving a pipeline in one role. A node serves at most one pipeline."""

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="placements")
    node = models.OneToOneField("nodes.Node", on_delete=models.CASCADE, related_name="placement")
    role = models.CharField(max_length=10, choices=PlacementRole.choices)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.node} as {self.role} in {self.pipeline}"


class PipelineRevision(models.Model):
    """Snapshot of a pipeline's configuration at each version: history and rollback."""

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="revisions")
    version = models.PositiveIntegerField()
    config = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-version"]
        constraints = [
            models.UniqueConstraint(fields=["pipeline", "version"], name="unique_pipeline_version")
        ]

    def __str__(self) -> str:
        return f"pipeline {self.pipeline_id} v{self.version}"


class ConfigPush(models.Model):
    """The outbox of configuration pushes: written in the change's own transaction, sent to
    the pipeline's workers after commit, deleted once delivered, retried until then
    (`fleet.pipelines.outbox`). A push sends the pipeline's configuration as it is when
    delivered: a late one never rolls a node back."""

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="+")
    node_ids = models.JSONField(null=True, blank=True, help_text="null: every placed node")
    created_at = models.DateTimeField(default=timezone.now)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"push of pipeline {self.pipeline_id} (attempts {self.attempts})"

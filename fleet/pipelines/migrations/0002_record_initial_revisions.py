"""Pipelines made outside `pipeline_create` (the local demo's rows, the simulator's) had no
revision of their first version, so their first configuration could not be restored. For
each such pipeline this records what can be known:

- no revision at all: the current configuration, as the revision of the current version
  (for a pipeline never changed, that is its first configuration);
- revisions from version m > 1 only: version m-1, then m-2 ... back to 1, rebuilt from the
  next revision and the `before` of the audit event written with it (in the same
  transaction, just after it: the first event within 5 s from that revision's time), as long
  as such an event exists.
  Rebuilt revisions carry `"rebuilt": true` and no placements (the audit log does not say
  where every node was).
"""

from datetime import timedelta

from django.db import migrations

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
SAME_TRANSACTION = timedelta(seconds=5)


def _current(pipeline, Placement) -> dict:
    rows = Placement.objects.filter(pipeline=pipeline).select_related("node").order_by("node_id")
    return {
        **{f: getattr(pipeline, f) for f in CONFIG_FIELDS},
        "placements": [{"node": p.node_id, "name": p.node.name, "role": p.role} for p in rows],
    }


def record(apps, schema_editor):
    Pipeline = apps.get_model("pipelines", "Pipeline")
    PipelineRevision = apps.get_model("pipelines", "PipelineRevision")
    Placement = apps.get_model("pipelines", "Placement")
    AuditEvent = apps.get_model("pipelines", "AuditEvent")
    for pipeline in Pipeline.objects.all():
        revisions = PipelineRevision.objects.filter(pipeline=pipeline).order_by("version")
        first = revisions.first()
        if first is None:
            made = pipeline.created_at if pipeline.version == 1 else pipeline.updated_at
            PipelineRevision.objects.create(
                pipeline=pipeline,
                version=pipeline.version,
                config=_current(pipeline, Placement),
                created_at=made,
            )
            continue
        later = first
        while later.version > 1:
            events = AuditEvent.objects.filter(pipeline=pipeline).order_by("created_at", "id")
            event = events.filter(
                created_at__gte=later.created_at,
                created_at__lte=later.created_at + SAME_TRANSACTION,
            ).first()
            if event is None:
                break
            config = {k: v for k, v in later.config.items() if k in CONFIG_FIELDS}
            config.update({k: v for k, v in (event.before or {}).items() if k in CONFIG_FIELDS})
            earlier = events.filter(created_at__lt=event.created_at).last()
            version = later.version - 1
            made = earlier.created_at if earlier and version > 1 else pipeline.created_at
            later = PipelineRevision.objects.create(
                pipeline=pipeline,
                version=version,
                config={**config, "rebuilt": True},
                created_at=made,
            )


class Migration(migrations.Migration):
    dependencies = [("pipelines", "0001_initial")]

    operations = [migrations.RunPython(record, migrations.RunPython.noop)]

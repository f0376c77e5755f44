"""The pipeline page's forms and history as an operator uses them: Remove is confirmed first,
Move preselects no target (real pipelines first, simulated ones labelled), the k form marks
each field with the mode that uses it and starts at the current policy; the first
configuration is a revision that can be restored; the audit log reads `field: old → new`."""

import importlib
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.utils import timezone

from fleet.audit.models import AuditEvent
from fleet.pipelines import services
from fleet.pipelines.models import Pipeline, PipelineRevision
from tests.factories import make_pipeline, online_node, place

pytestmark = pytest.mark.django_db


def _find(pattern, text, flags=0, group=0):
    """The match of `pattern` in `text` (failing the test when there is none)."""
    match = re.search(pattern, text, flags)
    assert match is not None, f"{pattern!r} not found"
    return match.group(group)


def _page(client, pipeline) -> str:
    return client.get(f"/pipelines/{pipeline.pk}/").content.decode()


def test_remove_asks_for_confirmation_first(pipeline, operator, client):
    client.force_login(operator)
    extra = online_node(name="gpu-v2")
    place(pipeline, extra, "verify")
    url = f"/pipelines/{pipeline.pk}/act/unplace"
    body = {"node": extra.pk, "version": 1, "next": f"/pipelines/{pipeline.pk}/"}
    ask = client.post(url, body)
    assert ask.status_code == 200
    assert "Remove gpu-v2 from main?" in ask.content.decode()
    assert pipeline.placements.filter(node=extra).exists()  # nothing happened yet
    for name, value in body.items():
        assert f'name="{name}" value="{value}"' in ask.content.decode()
    done = client.post(url, {**body, "confirmed": "yes"})
    assert done.status_code == 302 and done["Location"] == f"/pipelines/{pipeline.pk}/"
    assert not pipeline.placements.filter(node=extra).exists()
    assert AuditEvent.objects.filter(action="unplace", node=extra).count() == 1


def test_move_preselects_no_target_and_labels_simulated_pipelines(pipeline, operator, client):
    make_pipeline(name="aaa-sim", simulated=True)
    make_pipeline(name="zzz-real")
    client.force_login(operator)
    page = _page(client, pipeline)
    select = _find(r'<select name="to_pipeline"[^>]*>(.*?)</select>', page, re.S, group=1)
    options = re.findall(r"<option([^>]*)>([^<]*)</option>", select)
    assert options[0] == (' value="" selected disabled', "Move to…")
    assert [label for _, label in options[1:]] == ["zzz-real", "aaa-sim (simulated)"]
    assert all("selected" not in attrs for attrs, _ in options[1:])
    assert re.search(r'<select name="to_pipeline" required', page)


def test_moving_without_a_target_is_refused(pipeline, operator, client):
    make_pipeline(name="other")
    client.force_login(operator)
    drafter = pipeline.placements.get(role="draft").node
    r = client.post(
        f"/pipelines/{pipeline.pk}/act/move", {"node": drafter.pk, "to_pipeline": ""}, follow=True
    )
    assert b"Refused" in r.content
    assert pipeline.placements.filter(node=drafter).exists()


def test_k_form_fields_belong_to_their_mode_and_start_at_the_current_policy(
    pipeline, operator, client
):
    services.pipeline_set_k_policy(
        pipeline_id=pipeline.pk,
        actor=operator,
        k_policy={"mode": "table", "table": [[1, 6], [8, 2]]},
    )
    client.force_login(operator)
    page = _page(client, pipeline)
    form = _find(r'<form[^>]*id="form-k".*?</form>', page, re.S)
    assert '<option value="table" selected>' in form
    assert re.search(r'class="k-mode-fields k-mode-fixed">k <input name="k"', form)
    assert re.search(r'class="k-mode-fields k-mode-table">[^<]*<input name="table"', form)
    assert 'value="1:6, 8:2"' in form
    adaptive = _find(r'class="k-mode-fields k-mode-adaptive">.*?</label>', form, re.S)
    assert 'name="k_min"' in adaptive and 'name="k_max"' in adaptive


def test_the_first_configuration_of_a_pipeline_made_outside_the_service_is_restorable(
    operator, client
):
    """The local demo's rows are made with `Pipeline.objects.get_or_create` (no revision):
    its first change records version 1 before changing, so version 1 can be restored."""
    pipeline = Pipeline.objects.create(name="demo", target_model="t", draft_model="d")
    assert not PipelineRevision.objects.filter(pipeline=pipeline).exists()
    services.pipeline_set_k_policy(
        pipeline_id=pipeline.pk, actor=operator, k_policy={"mode": "fixed", "k": 2}
    )
    assert sorted(
        PipelineRevision.objects.filter(pipeline=pipeline).values_list("version", flat=True)
    ) == [1, 2]
    first = PipelineRevision.objects.get(pipeline=pipeline, version=1)
    assert first.config["k_policy"] == {"mode": "fixed", "k": 4}
    client.force_login(operator)
    page = _page(client, pipeline)
    row = _find(r'<tr data-version="1">.*?</tr>', page, re.S)
    assert "Roll back to this" in row and "initial" in row
    client.post(f"/pipelines/{pipeline.pk}/act/rollback", {"to_version": 1, "version": 2})
    restored = Pipeline.objects.get(pk=pipeline.pk)
    assert restored.k_policy == {"mode": "fixed", "k": 4} and restored.version == 3


def test_pipeline_create_records_version_one(operator):
    pipeline = services.pipeline_create(
        actor=operator, name="fresh", target_model="t", draft_model="d"
    )
    assert PipelineRevision.objects.filter(pipeline=pipeline, version=1).exists()


def test_the_audit_log_reads_as_a_diff(pipeline, operator, client):
    services.pipeline_set_k_policy(
        pipeline_id=pipeline.pk, actor=operator, k_policy={"mode": "fixed", "k": 2}, reason="try 2"
    )
    services.pipeline_update(
        pipeline_id=pipeline.pk, actor=operator, changes={"slo_itl_p99_ms": 40.0, "auto_mode": True}
    )
    client.force_login(operator)
    page = _page(client, pipeline)
    log = _find(r'<section class="card" id="audit-log">.*?</section>', page, re.S)
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", log))
    assert "k policy: k=4 → k=2" in text
    assert "ITL p99 SLO (ms): — → 40" in text and "auto mode: off → on" in text
    assert "{&#x27;" not in log and "{'" not in log and "&#x27;mode&#x27;" not in log


def test_the_diff_of_node_actions_and_rollbacks():
    event = AuditEvent(
        action="move",
        before={"pipeline": "a", "role": "draft"},
        after={"pipeline": "b", "role": "verify"},
    )
    assert [(c["label"], c["old"], c["new"]) for c in event.changes()] == [
        ("pipeline", "a", "b"),
        ("role", "draft", "verify"),
    ]
    rollback = AuditEvent(
        action="rollback",
        before={"k_policy": {"mode": "adaptive", "k_min": 1, "k_max": 6}},
        after={"k_policy": {"mode": "fixed", "k": 4}, "restored_version": 1},
    )
    assert [(c["label"], c["old"], c["new"]) for c in rollback.changes()] == [
        ("k policy", "adaptive k∈[1,6]", "k=4"),
        ("restored version", None, "v1"),
    ]


def _backfill():
    """The data migration, run with the models as they were at it (AuditEvent was still the
    pipelines app's then; it is the audit app's since)."""
    name = "0002_record_initial_revisions"
    migration = importlib.import_module(f"fleet.pipelines.migrations.{name}")
    state = MigrationLoader(connection).project_state(("pipelines", name))
    migration.record(state.apps, None)


def test_backfill_records_the_current_configuration_of_a_pipeline_without_revisions():
    untouched = Pipeline.objects.create(name="demo", target_model="t", draft_model="d")
    _backfill()
    revision = PipelineRevision.objects.get(pipeline=untouched)
    assert revision.version == 1 and revision.config["k_policy"] == {"mode": "fixed", "k": 4}
    _backfill()  # idempotent
    assert PipelineRevision.objects.filter(pipeline=untouched).count() == 1


def test_backfill_rebuilds_version_one_from_the_audit_log(operator):
    """A pipeline changed before the fix has version 2 but no version 1: version 1 is the
    version 2 configuration with the `before` of the event written with it."""
    pipeline = Pipeline.objects.create(
        name="demo",
        target_model="t",
        draft_model="d",
        created_at=timezone.now() - timedelta(hours=1),
    )
    Pipeline.objects.filter(pk=pipeline.pk).update(
        version=2, k_policy={"mode": "fixed", "k": 2}, max_verify_batch=16
    )
    pipeline.refresh_from_db()
    from fleet.pipelines.bookkeeping import snapshot

    two = PipelineRevision.objects.create(pipeline=pipeline, version=2, config=snapshot(pipeline))
    AuditEvent.objects.create(
        actor_label="bob",
        action="update",
        pipeline=pipeline,
        before={"k_policy": {"mode": "fixed", "k": 4}, "max_verify_batch": 32},
        after={"k_policy": {"mode": "fixed", "k": 2}, "max_verify_batch": 16},
        created_at=two.created_at + timedelta(milliseconds=3),
    )
    _backfill()
    one = PipelineRevision.objects.get(pipeline=pipeline, version=1)
    assert one.config["k_policy"] == {"mode": "fixed", "k": 4}
    assert one.config["max_verify_batch"] == 32 and one.config["target_model"] == "t"
    assert one.config["rebuilt"] is True and one.created_at == pipeline.created_at
    services.pipeline_rollback(pipeline_id=pipeline.pk, actor=operator, to_version=1)
    pipeline.refresh_from_db()
    assert pipeline.k_policy == {"mode": "fixed", "k": 4} and pipeline.max_verify_batch == 32


def test_a_node_change_marker_names_the_node():
    from fleet.audit.diff import describe_change

    move = ({"pipeline": "a", "role": "verify"}, {"pipeline": "b", "role": "verify"})
    assert describe_change("move", *move, node="gpu-3") == "gpu-3 moved a → b (verify)"
    turned = ({"pipeline": "a", "role": "draft"}, {"pipeline": "b", "role": "verify"})
    assert describe_change("move", *turned, node="gpu-3") == "gpu-3 moved a → b (draft → verify)"
    assert describe_change("drain", {"state": "online"}, {"state": "draining"}, node="n") == (
        "n draining"
    )
    assert describe_change("move", *move) == "pipeline a → b; role verify → verify"  # no node

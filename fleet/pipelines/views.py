"""Pipeline pages: list (viewers), create/edit and the action controls (operators).

Every POST goes through one service; refusals (400/409 in the API) come back as a message
on the page. The console's pipeline page can include `pipelines/_actions.html` (context:
`pipeline`, `free_nodes`, `other_pipelines`) for the same controls.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST

from fleet.accounts.errors import Conflict
from fleet.accounts.principal import require
from fleet.pipelines import selectors, services
from fleet.pipelines.models import DrafterKind, Pipeline

PAGE_SIZE = 50


class PipelineForm(forms.Form):
    name = forms.SlugField(max_length=64)
    description = forms.CharField(max_length=200, required=False)
    target_model = forms.CharField(max_length=300)
    drafter_kind = forms.ChoiceField(choices=DrafterKind.choices)
    draft_model = forms.CharField(max_length=300, required=False)
    k = forms.IntegerField(min_value=0, max_value=16, initial=4, label="k (fixed)")
    max_verify_batch = forms.IntegerField(min_value=1, max_value=1024, initial=32)
    max_batch_wait_ms = forms.IntegerField(min_value=0, max_value=1000, initial=5)
    slo_itl_p99_ms = forms.FloatField(min_value=0.001, required=False, label="ITL p99 SLO (ms)")
    slo_ttft_p99_ms = forms.FloatField(min_value=0.001, required=False, label="TTFT p99 SLO (ms)")
    power_budget_w = forms.FloatField(min_value=0.001, required=False, label="Power budget (W)")
    reason = forms.CharField(max_length=2000, required=False)


def parse_k_policy(data) -> dict:
    """k policy from form fields: mode + k | table "1:6, 8:4, 64:1" | k_min/k_max."""
    mode = data.get("mode", "fixed")
    try:
        if mode == "fixed":
            return {"mode": "fixed", "k": int(data.get("k", ""))}
        if mode == "table":
            rows = []
            for part in str(data.get("table", "")).split(","):
                if part.strip():
                    b, k = part.split(":")
                    rows.append([int(b), int(k)])
            return {"mode": "table", "table": rows}
        if mode == "adaptive":
            return {
                "mode": "adaptive",
                "k_min": int(data.get("k_min") or 0),
                "k_max": int(data.get("k_max") or 8),
            }
    except ValueError as exc:
        raise ValidationError({"k_policy": "k values and table rows must be integers"}) from exc
    raise ValidationError({"k_policy": "mode must be fixed, table or adaptive"})


def _errors_text(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        if hasattr(exc, "error_dict"):
            return "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
        return " ".join(exc.messages)
    return str(getattr(exc, "detail", exc))


@login_required
def pipeline_list(request):
    require(request, "view")
    page = Paginator(selectors.pipeline_list(), PAGE_SIZE).get_page(request.GET.get("page"))
    from inference.serving.readiness import warming_up

    warming = warming_up(page.object_list)
    for pipeline in page.object_list:
        pipeline.warmup = warming.get(pipeline.pk)
    return render(request, "pipelines/pipeline_list.html", {"page": page, "pipelines": page})


@login_required
@require_http_methods(["GET", "POST"])
def pipeline_new(request):
    require(request, "operate")
    form = PipelineForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        reason = data.pop("reason")
        data["k_policy"] = {"mode": "fixed", "k": data.pop("k")}
        try:
            pipeline = services.pipeline_create(actor=request.user, reason=reason, **data)
        except ValidationError as exc:
            if hasattr(exc, "error_dict"):
                for field, errs in exc.message_dict.items():
                    form.add_error(field if field in form.fields else None, errs)
            else:
                form.add_error(None, exc)
        else:
            messages.success(request, f"Pipeline {pipeline.name} created.")
            return redirect("pipelines:edit", pk=pipeline.pk)
    return render(request, "pipelines/pipeline_new.html", {"form": form})


def actions_context(pipeline: Pipeline) -> dict:
    return {
        "pipeline": pipeline,
        "free_nodes": selectors.free_nodes()[:200],
        "other_pipelines": Pipeline.objects.exclude(pk=pipeline.pk).only("id", "name"),
        "drafter_kinds": DrafterKind.choices,
    }


@login_required
def pipeline_edit(request, pk: int):
    require(request, "operate")
    pipeline = get_object_or_404(selectors.pipeline_queryset(), pk=pk)
    context = actions_context(pipeline) | {
        "revisions": selectors.revisions(pipeline=pipeline)[:50],
        "events": selectors.audit_events(pipeline=pipeline)[:50],
    }
    return render(request, "pipelines/pipeline_edit.html", context)


def _config_changes(post, current: dict | None = None) -> dict:
    changes: dict = {}
    for field in ("description", "target_model"):
        if field in post:
            changes[field] = post[field].strip()
    for field in ("max_verify_batch", "max_batch_wait_ms"):
        if post.get(field, "").strip():
            try:
                changes[field] = int(post[field])
            except ValueError as exc:
                raise ValidationError({field: "must be an integer"}) from exc
    for field in ("slo_itl_p99_ms", "slo_ttft_p99_ms", "power_budget_w"):
        if field in post:
            value = post[field].strip()
            try:
                changes[field] = float(value) if value else None
            except ValueError as exc:
                raise ValidationError({field: "must be a number"}) from exc
    if "auto_mode_present" in post:
        changes["auto_mode"] = post.get("auto_mode") == "on"
    if "auto_bounds_present" in post:
        changes["auto_bounds"] = _auto_bounds(post, current or {})
    return changes


AUTO_BOUND_FIELDS = (
    ("k_min", int),
    ("k_max", int),
    ("min_interval_s", float),
    ("hysteresis", float),
)


def _auto_bounds(post, current: dict) -> dict:
    """The operator's bounds for auto mode from the form (blank: the default)."""
    bounds = dict(current)
    for key, kind in AUTO_BOUND_FIELDS:
        raw = post.get(f"auto_{key}", "").strip()
        if not raw:
            bounds.pop(key, None)
            continue
        try:
            bounds[key] = kind(raw)
        except ValueError as exc:
            raise ValidationError({"auto_bounds": f"{key} must be a number"}) from exc
    bounds["allow_split"] = post.get("auto_allow_split") == "on"
    return bounds


def _act(request, pipeline: Pipeline, action: str) -> str:
    """Runs one action from form data; returns the success message."""
    post = request.POST
    common = {
        "actor": request.user,
        "expected_version": int(post["version"]) if post.get("version", "").isdigit() else None,
        "reason": post.get("reason", ""),
    }
    force = post.get("force") == "on"
    node_id = int(post["node"]) if post.get("node", "").isdigit() else None
    if action in {"move", "drain", "return", "unplace", "place"} and node_id is None:
        raise ValidationError({"node": "choose a node"})
    if action == "configure":
        services.pipeline_update(
            pipeline_id=pipeline.pk, changes=_config_changes(post, pipeline.auto_bounds), **common
        )
        return "Configuration saved."
    if action == "k_policy":
        services.pipeline_set_k_policy(
            pipeline_id=pipeline.pk, k_policy=parse_k_policy(post), **common
        )
        return "k policy set."
    if action == "swap_draft":
        services.pipeline_swap_draft(
            pipeline_id=pipeline.pk,
            drafter_kind=post.get("drafter_kind", DrafterKind.MODEL),
            draft_model=post.get("draft_model", "").strip(),
            **common,
        )
        return "Draft model swapped."
    if action == "rollback":
        if not post.get("to_version", "").isdigit():
            raise ValidationError({"to_version": "choose a version"})
        services.pipeline_rollback(
            pipeline_id=pipeline.pk, to_version=int(post["to_version"]), **common
        )
        return f"Rolled back to the configuration of version {post['to_version']}."
    if action == "place":
        services.node_place(
            pipeline_id=pipeline.pk,
            node_id=node_id,
            role=post.get("role", ""),
            force=force,
            **common,
        )
        return "Node placed."
    if node_id is not None and not pipeline.placements.filter(node_id=node_id).exists():
        raise Http404("no such node in this pipeline")
    if action == "move":
        if not post.get("to_pipeline", "").isdigit():
            raise ValidationError({"to_pipeline": "choose a pipeline"})
        common["expected_version"] = None  # the form shows this pipeline's version
        services.node_move(
            node_id=node_id,
            to_pipeline_id=int(post["to_pipeline"]),
            role=post.get("role") or None,
            force=force,
            **common,
        )
        return "Node moved."
    if action == "drain":
        services.node_drain(node_id=node_id, force=force, **common)
        return "Node draining: it finishes its sequences and takes no new ones."
    if action == "return":
        services.node_return(node_id=node_id, **common)
        return "Node returned to service."
    if action == "unplace":
        services.node_unplace(node_id=node_id, force=force, **common)
        return "Node taken out of the pipeline."
    raise Http404("unknown action")


@login_required
@require_POST
def pipeline_act(request, pk: int, action: str):
    require(request, "operate")
    pipeline = get_object_or_404(Pipeline, pk=pk)
    try:
        messages.success(request, _act(request, pipeline, action))
    except (ValidationError, Conflict) as exc:
        messages.error(request, f"Refused: {_errors_text(exc)}")
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}):
        return redirect(target)
    return redirect("pipelines:edit", pk=pipeline.pk)

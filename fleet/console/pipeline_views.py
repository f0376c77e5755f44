"""Pipeline pages (the console's, mounted at /pipelines/; the pipelines app does not import
the data plane for a page): list (viewers), create and the action controls (operators). A
pipeline's own page, live figures, controls, revisions and audit log together, is
`/pipelines/<id>/` (live_views); `/pipelines/<id>/edit` sends old links there.

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
from rest_framework.exceptions import ValidationError as DRFValidationError

from fleet.accounts.errors import Conflict, errors_text
from fleet.accounts.principal import require
from fleet.pipelines import api, selectors, services
from fleet.pipelines.models import DrafterKind, Pipeline
from fleet.pipelines.serializers import AutoBoundsFields, KPolicyFields, NodePick

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
            return redirect("console:pipeline", pk=pipeline.pk)
    return render(request, "pipelines/pipeline_new.html", {"form": form})


def actions_context(pipeline: Pipeline) -> dict:
    table = pipeline.k_policy.get("table") if isinstance(pipeline.k_policy, dict) else None
    return {
        "pipeline": pipeline,
        "free_nodes": selectors.free_nodes()[:200],
        # real pipelines first, simulated ones after (labelled); the page preselects none
        "other_pipelines": Pipeline.objects.exclude(pk=pipeline.pk)
        .only("id", "name", "simulated")
        .order_by("simulated", "name"),
        "drafter_kinds": DrafterKind.choices,
        "k_table_text": ", ".join(f"{b}:{k}" for b, k in table or []),
    }


# The page's actions: the API's action views, so a page POST is validated and carried out
# exactly as the same REST call (`_Action.run`); what the page adds is the message.
PAGE_ACTIONS = {
    "configure": (api.Configure, "Configuration saved."),
    "k_policy": (api.SetKPolicy, "k policy set."),
    "swap_draft": (api.SwapDraft, "Draft model swapped."),
    "rollback": (api.Rollback, "Rolled back to the configuration of version {to_version}."),
    "place": (api.Place, "Node placed."),
    "move": (api.Move, "Node moved."),
    "drain": (api.Drain, "Node draining: it finishes its sequences and takes no new ones."),
    "return": (api.Return, "Node returned to service."),
    "unplace": (api.Unplace, "Node taken out of the pipeline."),
}
ROW_ACTIONS = {"move", "drain", "return", "unplace"}  # the node is the API's path argument
NULLABLE = ("slo_itl_p99_ms", "slo_ttft_p99_ms", "power_budget_w")


def _form_data(post, action: str, pipeline: Pipeline) -> dict:
    """The form in the API's request shape: a blank field is left out (the API's default),
    a blank nullable one clears it, checkboxes are booleans, and the k policy and auto-mode
    bounds are built from their fields by the serializers that check them."""
    data = {k: v.strip() for k, v in post.items() if k not in ("csrfmiddlewaretoken", "next")}
    data = {k: v for k, v in data.items() if v}
    data["force"] = post.get("force") == "on"
    if action == "configure":
        data.pop("force")
        data.update({f: None for f in NULLABLE if f in post and not post[f].strip()})
        if "description" in post:  # a blank one clears it
            data["description"] = post["description"].strip()
        if "auto_mode_present" in post:
            data["auto_mode"] = post.get("auto_mode") == "on"
        if "auto_bounds_present" in post:
            split = "auto_allow_split" in post
            bounds = AutoBoundsFields(data={**data, "auto_allow_split": split})
            _valid(bounds, "auto_bounds")
            data["auto_bounds"] = bounds.bounds(pipeline.auto_bounds or {})
    elif action == "k_policy":
        policy = KPolicyFields(data=data)
        _valid(policy, "k_policy")
        data["k_policy"] = policy.k_policy()
    elif action == "move":
        data.pop("version", None)  # the form shows this pipeline's version, not the destination's
    return data


def _valid(fields, name: str) -> None:
    if not fields.is_valid():
        raise DRFValidationError({name: fields.errors})


def _act(request, pipeline: Pipeline, action: str) -> str:
    """Runs one action from form data; returns the success message."""
    if action not in PAGE_ACTIONS:
        raise Http404("unknown action")
    view, done = PAGE_ACTIONS[action]
    node_id = None
    if action in ROW_ACTIONS:
        picked = NodePick(data=request.POST)
        picked.is_valid(raise_exception=True)
        node_id = picked.validated_data["node"]
    data = _form_data(request.POST, action, pipeline)
    view.run(request=request, pipeline=pipeline, node_id=node_id, data=data)
    return done.format(**data)


# Actions an operator confirms on a page of their own before they happen (no script: CSP).
CONFIRM = {
    "unplace": (
        "Remove {node} from {pipeline}?",
        "It goes back to the pool of free nodes; sequences it holds are cut short.",
        "Remove",
    ),
}


def _confirm_page(request, pipeline: Pipeline, action: str):
    title, detail, button = CONFIRM[action]
    node = pipeline.placements.filter(node_id=request.POST.get("node") or 0).first()
    names = {"node": node.node.name if node else "the node", "pipeline": pipeline.name}
    carried = [
        (k, v) for k, v in request.POST.items() if k not in ("csrfmiddlewaretoken", "confirmed")
    ]
    return render(
        request,
        "confirm.html",
        {
            "title": title.format(**names),
            "detail": detail,
            "button": button,
            "action_url": request.path,
            "carried": carried,
            "cancel_url": _next_url(request) or f"/pipelines/{pipeline.pk}/",
        },
    )


def _next_url(request) -> str:
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}):
        return target
    return ""


@login_required
@require_POST
def pipeline_act(request, pk: int, action: str):
    require(request, "operate")
    pipeline = get_object_or_404(Pipeline, pk=pk)
    if action in CONFIRM and request.POST.get("confirmed") != "yes":
        return _confirm_page(request, pipeline, action)
    try:
        messages.success(request, _act(request, pipeline, action))
    except (ValidationError, DRFValidationError, Conflict) as exc:
        messages.error(request, f"Refused: {errors_text(exc)}")
    target = _next_url(request)
    return redirect(target) if target else redirect("console:pipeline", pk=pipeline.pk)

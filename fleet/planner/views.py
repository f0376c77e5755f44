"""Planner pages: index, what-if, a pipeline's recommendations with preview and apply.

Reading predictions needs "view" (they change nothing); applying needs "operate".
Every figure on these pages is labelled modeled.
"""

from __future__ import annotations

import json

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST
from rest_framework.exceptions import ValidationError as DRFValidationError

from fleet.accounts.access import can
from fleet.accounts.errors import Conflict, errors_text
from fleet.accounts.principal import require
from fleet.nodes.models import HardwareProfile
from fleet.pipelines.models import Pipeline
from fleet.pipelines.serializers import KPolicyFields
from fleet.planner import services, whatif


@login_required
def index(request):
    require(request, "view")
    pipelines = Pipeline.objects.order_by("simulated", "name")[:200]
    return render(request, "planner/index.html", {"pipelines": pipelines})


class WhatIfForm(forms.Form):
    move_to_verify = forms.IntegerField(
        min_value=0,
        max_value=100_000,
        required=False,
        initial=0,
        label="Move N GPUs from drafting to verification",
    )
    move_to_draft = forms.IntegerField(
        min_value=0,
        max_value=100_000,
        required=False,
        initial=0,
        label="Move N GPUs from verification to drafting",
    )
    add_drafters = forms.IntegerField(
        min_value=0, max_value=100_000, required=False, initial=0, label="Add M drafters"
    )
    add_drafter_profile = forms.ChoiceField(required=False, label="of profile")
    add_verifiers = forms.IntegerField(
        min_value=0, max_value=100_000, required=False, initial=0, label="Add M verifiers"
    )
    add_verifier_profile = forms.ChoiceField(required=False, label="of profile")
    include_simulated = forms.BooleanField(
        required=False, initial=True, label="Include simulated pipelines"
    )

    def __init__(self, *args, profiles=(), **kwargs):
        super().__init__(*args, **kwargs)
        drafters = [(p.slug, str(p)) for p in profiles if p.kind != "gpu"] + [
            (p.slug, str(p)) for p in profiles if p.kind == "gpu"
        ]
        verifiers = [(p.slug, str(p)) for p in profiles if p.kind != "sram-accelerator"]
        self.fields["add_drafter_profile"].choices = drafters
        self.fields["add_verifier_profile"].choices = verifiers


@login_required
def what_if(request):
    require(request, "view")
    profiles = list(HardwareProfile.objects.order_by("kind", "slug"))
    submitted = "run" in request.GET
    form = WhatIfForm(request.GET if submitted else None, profiles=profiles)
    result = None
    if submitted and form.is_valid():
        changes = {k: v for k, v in form.cleaned_data.items() if k != "include_simulated"}
        prices = {}
        for p in profiles:
            raw = request.GET.get(f"price_{p.slug}", "").strip()
            if raw:
                try:
                    prices[p.slug] = max(float(raw), 0.0)
                except ValueError:
                    form.add_error(None, f"price of {p.slug} must be a number")
        changes["prices"] = prices
        if form.is_valid():
            result = whatif.what_if(
                changes, include_simulated=form.cleaned_data["include_simulated"]
            )
    unpriced = [
        (p, request.GET.get(f"price_{p.slug}", ""))
        for p in profiles
        if p.usd_per_hour is None and p.list_price_usd is None
    ]
    return render(
        request, "planner/what_if.html", {"form": form, "result": result, "unpriced": unpriced}
    )


@login_required
def recommendations(request, pk: int):
    require(request, "view")
    pipeline = get_object_or_404(Pipeline, pk=pk)
    rec = services.recommendation(pipeline=pipeline)
    preview = None
    if "preview" in request.GET:
        try:
            action = _preview_action(request.GET)
            preview = services.preview(pipeline=pipeline, action=action)
        except ValidationError as exc:
            messages.error(request, f"Preview refused: {errors_text(exc)}")
    chosen = _chosen(request.GET if "preview" in request.GET else None, pipeline, rec)
    return render(
        request,
        "planner/recommendations.html",
        {
            "pipeline": pipeline,
            "rec": rec,
            "preview": preview,
            "chosen": chosen,
            # a preview that one pipeline action carries out: the form posts to that action
            # (the pipeline page's audited door, the same as its REST call)
            "apply_action": APPLY_PREVIEW.get(chosen["action"]) if preview else None,
            "preview_url": request.get_full_path(),
            "preview_actions": PREVIEW_CHOICES,
            "can_operate": can(request.user, "operate"),
            "rec_json": json.dumps(rec, indent=1, default=str),
            "checks": list(pipeline.apply_checks.all()[:10]),
        },
    )


# A previewed action -> the pipeline action that carries it out (pipelines:act). A split moves
# several nodes: it is applied from the recommendation's row (planner:apply) instead.
APPLY_PREVIEW = {
    "set_k_policy": "k_policy",
    "set_batch_caps": "configure",
    "place": "place",
    "change_role": "place",
    "remove_node": "unplace",
}
PREVIEW_CHOICES = [
    ("set_k_policy", "set k policy"),
    ("set_batch_caps", "set max verify batch"),
    ("place", "place a node"),
    ("change_role", "change a node's role"),
    ("remove_node", "remove a node"),
    ("split", "drafter:verifier split"),
]


def _chosen(data, pipeline: Pipeline, rec) -> dict:
    """The preview form's values: what was asked (a preview keeps the chosen k, mode, node…),
    else the pipeline's own configuration."""
    policy = pipeline.k_policy if isinstance(pipeline.k_policy, dict) else {}
    inputs = rec.get("inputs") or {} if isinstance(rec, dict) else {}
    values = {
        "action": "set_k_policy",
        "mode": policy.get("mode", "fixed"),
        "k": str(policy.get("k", 4)),
        "table": ", ".join(f"{b}:{k}" for b, k in policy.get("table") or []),
        "max_verify_batch": str(pipeline.max_verify_batch),
        "node": "",
        "role": "verify",
        "n_verifiers": str(inputs.get("n_verifiers", "")),
        "n_drafters": str(inputs.get("n_drafters", "")),
    }
    if data is not None:
        values.update({k: data[k].strip() for k in values if k in data})
    return values


def _preview_action(data) -> dict:
    kind = data.get("action", "")
    if kind == "set_k_policy":
        fields = KPolicyFields(data={k: v for k, v in data.items() if v.strip()})
        if not fields.is_valid():
            raise ValidationError({"k_policy": errors_text(DRFValidationError(fields.errors))})
        return {"action": kind, "k_policy": fields.k_policy()}
    if kind == "set_batch_caps":
        try:
            return {"action": kind, "max_verify_batch": int(data.get("max_verify_batch", ""))}
        except ValueError as exc:
            raise ValidationError({"max_verify_batch": "an integer"}) from exc
    if kind in ("place", "change_role", "remove_node"):
        return {"action": kind, "node": data.get("node"), "role": data.get("role")}
    if kind == "split":
        return {
            "action": kind,
            "n_verifiers": data.get("n_verifiers"),
            "n_drafters": data.get("n_drafters"),
        }
    raise ValidationError({"action": "choose an action to preview"})


@login_required
@require_POST
def apply(request, pk: int):
    require(request, "operate")
    pipeline = get_object_or_404(Pipeline, pk=pk)
    version = request.POST.get("version", "")
    try:
        result = services.apply(
            pipeline=pipeline,
            what=request.POST.get("what", ""),
            actor=request.user,
            expected_version=int(version) if version.isdigit() else None,
            reason=request.POST.get("reason", ""),
        )
        messages.success(request, f"Applied the planner's {result['applied'].replace('_', ' ')}.")
    except (ValidationError, Conflict) as exc:
        messages.error(request, f"Refused: {errors_text(exc)}")
    return redirect("planner:recommendations", pk=pipeline.pk)

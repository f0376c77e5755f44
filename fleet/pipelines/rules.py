"""The rules every pipeline action is checked against (reads only; services write):
roles a node may take, node state, the power budget, at least one healthy drafter and
verifier left, and a valid configuration (k policy, SLOs, draft/target compatibility)."""

from __future__ import annotations

from django.core.exceptions import ValidationError

from fleet.accounts.errors import Conflict
from fleet.nodes.choices import NodeState, ProfileKind
from fleet.nodes.models import Node
from fleet.pipelines import compat, model_refs
from fleet.pipelines.models import DrafterKind, Pipeline, Placement, PlacementRole
from fleet.pipelines.policy import PolicyError, validate_policy


class StaleVersion(Conflict):
    default_code = "stale_version"

    def __init__(self, pipeline: Pipeline, expected: int):
        super().__init__(
            f"Pipeline {pipeline.name!r} is at version {pipeline.version}, not {expected}: it "
            "changed since you read it. Reload and try again."
        )
        self.current, self.expected = pipeline.version, expected


class ActionRefused(Conflict):
    """The action would leave the pipeline in a state the rules forbid (409)."""

    default_code = "refused"


def is_healthy(node: Node) -> bool:
    return node.state == NodeState.ONLINE and not node.is_lost()


def healthy_counts(pipeline: Pipeline, *, exclude_node: int | None = None) -> dict[str, int]:
    counts = {PlacementRole.DRAFT: 0, PlacementRole.VERIFY: 0}
    qs = Placement.objects.filter(pipeline=pipeline).select_related("node")
    for p in qs:
        if p.node_id != exclude_node and is_healthy(p.node):
            counts[p.role] += 1
    return counts


def needs_drafter(pipeline: Pipeline) -> bool:
    return pipeline.drafter_kind == DrafterKind.MODEL


def check_keeps_healthy(pipeline: Pipeline, *, leaving: Node, force: bool) -> None:
    """Refuse (409) if `leaving` is the last healthy node of its role in `pipeline`."""
    if force:
        return
    placement = Placement.objects.filter(pipeline=pipeline, node=leaving).first()
    if placement is None or not is_healthy(leaving):
        return
    if placement.role == PlacementRole.DRAFT and not needs_drafter(pipeline):
        return
    left = healthy_counts(pipeline, exclude_node=leaving.pk)[placement.role]
    if left == 0:
        raise ActionRefused(
            f"{leaving.name} is the last healthy {placement.get_role_display()} of pipeline "
            f"{pipeline.name!r}; pass force to do it anyway."
        )


def placed_power_w(
    pipeline: Pipeline, *, extra: Node | None = None, without: int | None = None
) -> float:
    qs = Placement.objects.filter(pipeline=pipeline).exclude(node__state=NodeState.RETIRED)
    if without is not None:
        qs = qs.exclude(node_id=without)
    total = sum(p.node.profile.tdp_w for p in qs.select_related("node__profile"))
    if extra is not None:
        total += extra.profile.tdp_w
    return float(total)


def check_power(pipeline: Pipeline, total_w: float) -> None:
    if pipeline.power_budget_w is not None and total_w > pipeline.power_budget_w + 1e-9:
        raise ValidationError(
            {
                "power_budget_w": f"placed nodes would draw up to {total_w:.0f} W (sum of TDP), "
                f"over the pipeline's budget of {pipeline.power_budget_w:.0f} W"
            }
        )


def allowed_roles(node: Node) -> set[str]:
    """Roles a node may take: those it registered with, limited by its hardware (an SRAM
    accelerator holds a small draft model, never the target)."""
    roles = set(node.roles or [])
    if node.profile.kind == ProfileKind.SRAM_ACCELERATOR:
        roles &= {PlacementRole.DRAFT}
    return roles


def check_placeable(node: Node, role: str, *, force: bool) -> None:
    if role not in PlacementRole.values:
        raise ValidationError({"role": f"role must be one of {', '.join(PlacementRole.values)}"})
    if role not in allowed_roles(node):
        raise ValidationError(
            {
                "role": f"{node.name} ({node.profile}) cannot be a {role} node; it allows "
                f"{', '.join(sorted(allowed_roles(node))) or 'no role'}"
            }
        )
    if node.state == NodeState.RETIRED:
        raise ValidationError({"node": f"{node.name} is retired"})
    if not force and (node.state == NodeState.LOST or node.is_lost()):
        raise ActionRefused(f"{node.name} is lost; pass force to place it anyway.")


def validate_config(
    config: dict, *, current: Pipeline | None = None, check_model_refs: bool = True
) -> dict:
    """Normalize and check configuration fields; raises ValidationError with field errors.
    `check_model_refs=False` only for references written in code (this machine's local
    pipelines), never for a caller's input: they may be links the models directory holds."""
    errors: dict[str, str] = {}
    out = dict(config)
    if "k_policy" in out:
        try:
            out["k_policy"] = validate_policy(out["k_policy"])
        except PolicyError as exc:
            errors["k_policy"] = f"{exc.field}: {exc}"
    if "auto_bounds" in out:
        bounds = out["auto_bounds"]
        if not isinstance(bounds, dict):
            errors["auto_bounds"] = "auto_bounds must be an object"
        else:
            for key in ("k_min", "k_max", "min_interval_s", "max_verify_batch"):
                v = bounds.get(key)
                if v is not None and (
                    isinstance(v, bool) or not isinstance(v, int | float) or v < 0
                ):
                    errors["auto_bounds"] = f"{key} must be a non-negative number"
            if not errors.get("auto_bounds") and bounds.get("k_min", 0) > bounds.get("k_max", 16):
                errors["auto_bounds"] = "k_min must not exceed k_max"
    for field in ("slo_itl_p99_ms", "slo_ttft_p99_ms", "power_budget_w"):
        v = out.get(field)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or v <= 0):
            errors[field] = "must be a positive number or null"
    kind = out.get("drafter_kind", current.drafter_kind if current else DrafterKind.MODEL)
    draft = out.get("draft_model", current.draft_model if current else "")
    target = out.get("target_model", current.target_model if current else "")
    if kind not in DrafterKind.values:
        errors["drafter_kind"] = f"must be one of {', '.join(DrafterKind.values)}"
    elif kind == DrafterKind.MODEL and not draft:
        errors["draft_model"] = "a draft model is required when the drafter kind is 'model'"
    if "target_model" in out and not target:
        errors["target_model"] = "required"
    for field in ("target_model", "draft_model"):
        if check_model_refs and out.get(field) and field not in errors:
            try:
                model_refs.resolve(out[field])
            except model_refs.UnknownModel as exc:
                errors[field] = str(exc)
    if errors:
        raise ValidationError(errors)
    if kind == DrafterKind.MODEL and ({"draft_model", "target_model", "drafter_kind"} & out.keys()):
        result = compat.check_pair(target, draft)
        if not result.ok:
            raise ValidationError({"draft_model": result.reason})
    return out

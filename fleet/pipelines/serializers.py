"""What a write to a pipeline accepts: the serializers both doors validate with, the REST API
(`api.py`) and the pages (`views.py`). Shape checks only; the services validate meaning
(policy, compatibility, power budget, healthy pairs).

The HTML forms send a few things in a flatter shape than the API's JSON (a k policy as
mode/k/table fields, auto-mode bounds as `auto_*` fields); `KPolicyFields` and
`AutoBoundsFields` validate those and build the API's value from them.
"""

from __future__ import annotations

from rest_framework import serializers

from fleet.pipelines.models import DrafterKind, PlacementRole


class PipelineWriteSerializer(serializers.Serializer):
    """Create (POST) and configure (PATCH; the pages' "configure"): every field optional."""

    name = serializers.SlugField(max_length=64, required=False)
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    target_model = serializers.CharField(max_length=300, required=False)
    drafter_kind = serializers.ChoiceField(DrafterKind.choices, required=False)
    draft_model = serializers.CharField(max_length=300, required=False, allow_blank=True)
    k_policy = serializers.JSONField(required=False)
    max_verify_batch = serializers.IntegerField(min_value=1, max_value=1024, required=False)
    max_batch_wait_ms = serializers.IntegerField(min_value=0, max_value=1000, required=False)
    slo_itl_p99_ms = serializers.FloatField(min_value=0.001, required=False, allow_null=True)
    slo_ttft_p99_ms = serializers.FloatField(min_value=0.001, required=False, allow_null=True)
    power_budget_w = serializers.FloatField(min_value=0.001, required=False, allow_null=True)
    auto_mode = serializers.BooleanField(required=False)
    auto_bounds = serializers.JSONField(required=False)
    simulated = serializers.BooleanField(required=False)
    version = serializers.IntegerField(min_value=1, required=False)
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True)


class ActionInput(serializers.Serializer):
    version = serializers.IntegerField(min_value=1, required=False)
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    force = serializers.BooleanField(required=False, default=False)


class PlaceInput(ActionInput):
    node = serializers.IntegerField(min_value=1)
    role = serializers.ChoiceField(PlacementRole.choices)


class MoveInput(ActionInput):
    to_pipeline = serializers.IntegerField(min_value=1)
    role = serializers.ChoiceField(PlacementRole.choices, required=False)


class KPolicyInput(ActionInput):
    k_policy = serializers.JSONField()


class BatchCapsInput(ActionInput):
    max_verify_batch = serializers.IntegerField(min_value=1, max_value=1024, required=False)
    max_batch_wait_ms = serializers.IntegerField(min_value=0, max_value=1000, required=False)


class SwapDraftInput(ActionInput):
    drafter_kind = serializers.ChoiceField(DrafterKind.choices, default=DrafterKind.MODEL)
    draft_model = serializers.CharField(
        max_length=300, required=False, allow_blank=True, default=""
    )


class RollbackInput(ActionInput):
    to_version = serializers.IntegerField(min_value=1)


class NodeStateInput(serializers.Serializer):
    """`/api/v1/nodes/<id>/drain|return`: an optional body."""

    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    force = serializers.BooleanField(required=False, default=False)


class NodePick(serializers.Serializer):
    """The node a page's row action is about (the API has it in the path)."""

    node = serializers.IntegerField(min_value=1, error_messages={"required": "choose a node"})


# --- the forms' flatter shapes ---------------------------------------------------------------


class KPolicyFields(serializers.Serializer):
    """A k policy as a form sends it: mode + k | table "1:6, 8:4, 64:1" | k_min/k_max.
    `k_policy()` is the API's value (the service checks its meaning)."""

    mode = serializers.ChoiceField(["fixed", "table", "adaptive"], default="fixed")
    k = serializers.IntegerField(required=False)
    table = serializers.CharField(required=False, default="")
    k_min = serializers.IntegerField(required=False, default=0)
    k_max = serializers.IntegerField(required=False, default=8)

    def validate_table(self, value: str) -> list[list[int]]:
        rows = []
        for part in value.split(","):
            if not part.strip():
                continue
            batch, _, k = part.partition(":")
            try:
                rows.append([int(batch), int(k)])
            except ValueError as exc:
                raise serializers.ValidationError(
                    f"{part.strip()!r}: rows are batch:k, both integers"
                ) from exc
        return rows

    def validate(self, data: dict) -> dict:
        if data["mode"] == "fixed" and "k" not in data:
            raise serializers.ValidationError({"k": "a fixed policy needs k"})
        return data

    def k_policy(self) -> dict:
        data = self.validated_data
        if data["mode"] == "fixed":
            return {"mode": "fixed", "k": data["k"]}
        if data["mode"] == "table":
            return {"mode": "table", "table": data["table"]}
        return {"mode": "adaptive", "k_min": data["k_min"], "k_max": data["k_max"]}


class AutoBoundsFields(serializers.Serializer):
    """Auto mode's bounds as the form sends them (`auto_<key>`; a blank one: the default)."""

    auto_k_min = serializers.IntegerField(required=False)
    auto_k_max = serializers.IntegerField(required=False)
    auto_min_interval_s = serializers.FloatField(required=False)
    auto_hysteresis = serializers.FloatField(required=False)
    auto_allow_split = serializers.BooleanField(required=False, default=False)

    def bounds(self, current: dict) -> dict:
        """`current` with the form's values; a blank field drops its key (the default)."""
        data = self.validated_data
        bounds = dict(current)
        for key in ("k_min", "k_max", "min_interval_s", "hysteresis"):
            if f"auto_{key}" in data:
                bounds[key] = data[f"auto_{key}"]
            else:
                bounds.pop(key, None)
        bounds["allow_split"] = data["auto_allow_split"]
        return bounds

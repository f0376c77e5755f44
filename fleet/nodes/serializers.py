"""API shapes of the node registry: profiles, nodes, tokens and heartbeats."""

from __future__ import annotations

from django.conf import settings
from rest_framework import serializers

from fleet.nodes.choices import NodeRole
from fleet.nodes.models import HardwareProfile, Node, NodeToken
from fleet.nodes.signing import token_key
from fleet.nodes.validators import (
    MAX_LABEL_VALUE,
    normalize_roles,
    validate_device_info,
    validate_labels,
)


class ProfileSerializer(serializers.ModelSerializer):
    sources = serializers.DictField(
        child=serializers.CharField(max_length=500),
        required=False,
        help_text="Public source of each figure, keyed by field name.",
    )

    class Meta:
        model = HardwareProfile
        fields = [
            "id",
            "slug",
            "kind",
            "vendor",
            "model",
            "memory_gb",
            "memory_bandwidth_gbs",
            "peak_bf16_tflops",
            "tdp_w",
            "idle_w",
            "list_price_usd",
            "usd_per_hour",
            "sources",
            "notes",
        ]


class RolesField(serializers.ListField):
    child = serializers.ChoiceField(choices=NodeRole.choices)

    def __init__(self, **kwargs):
        kwargs.setdefault("allow_empty", False)
        kwargs.setdefault("max_length", len(NodeRole.values))
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        return normalize_roles(super().to_internal_value(data))


class StrictCharField(serializers.CharField):
    """A string, not something that can be turned into one (labels are str -> str)."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class LabelsField(serializers.DictField):
    child = StrictCharField(max_length=MAX_LABEL_VALUE, allow_blank=True)

    def __init__(self, **kwargs):
        kwargs.setdefault("validators", [validate_labels])
        super().__init__(**kwargs)


class NodeSerializer(serializers.ModelSerializer):
    profile: serializers.SlugRelatedField[HardwareProfile] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    profile_kind = serializers.CharField(source="profile.kind", read_only=True)
    roles = RolesField(read_only=True)
    labels = LabelsField(read_only=True)
    is_lost = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "profile",
            "profile_kind",
            "roles",
            "state",
            "labels",
            "address",
            "agent_version",
            "device_info",
            "last_seen",
            "is_lost",
            "simulated",
            "version",
            "created",
            "updated",
        ]
        read_only_fields = fields

    def get_is_lost(self, node: Node) -> bool:
        return node.is_lost()


class NodeCreateSerializer(serializers.ModelSerializer):
    profile = serializers.SlugRelatedField(
        slug_field="slug", queryset=HardwareProfile.objects.all()
    )
    roles = RolesField()
    labels = LabelsField(required=False)

    class Meta:
        model = Node
        fields = ["name", "profile", "roles", "labels", "address", "simulated"]


class NodeUpdateSerializer(NodeCreateSerializer):
    version = serializers.IntegerField(
        required=False,
        min_value=1,
        help_text="The version you read; a stale one is refused with 409 (or send If-Match).",
    )

    class Meta(NodeCreateSerializer.Meta):
        fields = [*NodeCreateSerializer.Meta.fields, "version"]


class NodeRegisteredSerializer(NodeSerializer):
    token = serializers.CharField(
        read_only=True, help_text="The node token. Shown once: store it now."
    )

    class Meta(NodeSerializer.Meta):
        fields = [*NodeSerializer.Meta.fields, "token"]
        read_only_fields = fields


class NodeTokenSerializer(serializers.ModelSerializer):
    active = serializers.BooleanField(read_only=True)

    class Meta:
        model = NodeToken
        fields = ["prefix", "created", "revoked_at", "active"]
        read_only_fields = fields


class NodeTokenIssuedSerializer(NodeTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="Shown once: store it now.")

    class Meta(NodeTokenSerializer.Meta):
        fields = [*NodeTokenSerializer.Meta.fields, "token"]
        read_only_fields = fields


class LeavingSerializer(serializers.Serializer):
    """The body of a change that takes a node away for good (retire, revoking its tokens)."""

    force = serializers.BooleanField(
        default=False,
        help_text="Do it even if the node is its pipeline's last healthy drafter or verifier "
        "(refused with 409 otherwise).",
    )


class TokensRevokedSerializer(serializers.Serializer):
    revoked = serializers.IntegerField(help_text="How many active tokens were revoked.")


class HeartbeatSerializer(serializers.Serializer):
    """Liveness only: the agent is there, and what it runs on. Its figures travel as signed
    telemetry samples (fleet/telemetry), never here."""

    agent_version = serializers.CharField(max_length=64, required=False, allow_blank=True)
    device_info = serializers.DictField(
        required=False,
        validators=[validate_device_info],
        help_text="What the agent found: torch/NVML device name, memory, driver, ...",
    )
    address = serializers.CharField(max_length=255, required=False, allow_blank=True)

    def validate(self, data):
        if "telemetry" in self.initial_data:  # an agent from before: say so, drop nothing quietly
            raise serializers.ValidationError(
                {"telemetry": ["Heartbeats carry liveness only; send figures as signed samples."]}
            )
        return data


class HeartbeatReplySerializer(serializers.Serializer):
    """What the node should be doing: a small hook the agent polls with each heartbeat."""

    node = serializers.IntegerField(source="pk")
    state = serializers.CharField()
    roles = serializers.ListField(child=serializers.CharField())
    config_version = serializers.IntegerField(source="version")
    heartbeat_period_s = serializers.SerializerMethodField()
    telemetry_key = serializers.SerializerMethodField(
        help_text="The key this agent signs its telemetry samples with (its token's own)."
    )

    def get_heartbeat_period_s(self, node) -> int:
        return settings.HEARTBEAT_PERIOD_S

    def get_telemetry_key(self, node) -> str | None:
        token = self.context.get("token")
        return token_key(node.pk, token) if token else None

"""REST API for API keys: `/api/v1/api-keys`.

Everyone with a role manages their own keys (a viewer's key is read-only because the viewer
is); admins see and revoke everyone's and may create a key for another user. The plain key is
in the creation response only. DELETE revokes (idempotent: 200 with the key either way).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.response import Response

from fleet.accounts.access import can
from fleet.accounts.models import ApiKey
from fleet.accounts.services import api_key_create, api_key_revoke

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class ApiKeySerializer(serializers.ModelSerializer):
    user: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    active = serializers.SerializerMethodField()

    class Meta:
        model = ApiKey
        fields = [
            "id",
            "name",
            "prefix",
            "user",
            "created_at",
            "last_used_at",
            "revoked_at",
            "active",
        ]
        read_only_fields = fields

    def get_active(self, obj) -> bool:
        return obj.revoked_at is None


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.SerializerMethodField(help_text="The plain key: shown this once only.")

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "key"]
        read_only_fields = fields

    def get_key(self, obj) -> str:
        return self.context["plain"]


class ApiKeyCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    user = serializers.CharField(
        required=False, help_text="Admins only: create the key for this username."
    )

    def validate_user(self, username):
        request = self.context["request"]
        if username == request.user.get_username():
            return request.user
        if not can(request.user, "administer"):
            raise serializers.ValidationError("Only an admin may create keys for other users.")
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise serializers.ValidationError(f"No user named {username!r}.")
        return user


def keys_for(user):
    keys = ApiKey.objects.select_related("user").order_by("-created_at", "-id")
    return keys if can(user, "administer") else keys.filter(user=user)


class ApiKeyListCreate(generics.ListCreateAPIView):
    """Your API keys (admins: everyone's; `?user=<username>`), or create one."""

    serializer_class = ApiKeySerializer
    method_actions = {"POST": "view"}
    filter_backends: list = []

    def get_queryset(self):
        keys = keys_for(self.request.user)
        username = self.request.query_params.get("user")
        return keys.filter(user__username=username) if username else keys

    @extend_schema(request=ApiKeyCreateSerializer, responses={201: ApiKeyCreatedSerializer})
    def post(self, request, *args, **kwargs):
        incoming = ApiKeyCreateSerializer(data=request.data, context={"request": request})
        incoming.is_valid(raise_exception=True)
        owner = incoming.validated_data.get("user") or request.user
        key, plain = api_key_create(user=owner, name=incoming.validated_data["name"])
        body = ApiKeyCreatedSerializer(key, context={"plain": plain}).data
        return Response(body, status=status.HTTP_201_CREATED)


class ApiKeyDetail(generics.RetrieveDestroyAPIView):
    """One key; DELETE revokes it (the row stays, for the record)."""

    serializer_class = ApiKeySerializer
    method_actions = {"DELETE": "view"}  # narrowed to own keys by the queryset

    def get_queryset(self):
        return keys_for(self.request.user)

    def destroy(self, request, *args, **kwargs):
        key = api_key_revoke(key=self.get_object())
        return Response(ApiKeySerializer(key).data, status=status.HTTP_200_OK)

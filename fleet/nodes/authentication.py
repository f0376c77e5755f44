"""Node agents authenticate with their node token: `Authorization: Bearer tdn_<prefix>_<secret>`.

The principal is a `NodeAgent`, not a user: it has no `groups`, so the role policy gives it
no console role (admin and operator endpoints answer 403), and `IsNodeAgentForNode`
confines it to the endpoints of its own node.
"""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from fleet.accounts.authentication import bearer_token
from fleet.nodes.models import Node
from fleet.nodes.selectors import node_for_token


class NodeAgent:
    """The authenticated agent of one node (what `request.user` is for a node token)."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False

    def __init__(self, node: Node):
        self.node = node
        self.node_id = node.pk

    @property
    def pk(self) -> None:  # not a user: nothing may store it as one
        return None

    def __str__(self) -> str:
        return f"node-agent:{self.node.name}"


class NodeTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        token = bearer_token(request)
        if token is None or not token.startswith("tdn_"):
            return None  # not ours: API keys (tdm_) are handled by the accounts app
        node = node_for_token(token)
        if node is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked node token.")
        return (NodeAgent(node), token)

    def authenticate_header(self, request) -> str:
        return self.keyword


class IsNodeAgentForNode(permissions.BasePermission):
    """Only the agent of the node named by the URL (`pk`) may call the view."""

    message = "This endpoint is for the node's own agent, with that node's token."

    def has_permission(self, request, view) -> bool:
        agent = request.user
        if not isinstance(agent, NodeAgent):
            return False
        return str(view.kwargs.get("pk")) == str(agent.node_id)


class NodeTokenScheme(OpenApiAuthenticationExtension):
    target_class = "fleet.nodes.authentication.NodeTokenAuthentication"
    name = "nodeToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "tdn_<prefix>_<secret>"}


class ApiKeyScheme(OpenApiAuthenticationExtension):
    """Schema entry for the accounts app's API keys. It belongs next to
    ApiKeyAuthentication in fleet/accounts/authentication.py (move it there when that file
    gets one; two extensions for one class are harmless: the highest priority wins)."""

    target_class = "fleet.accounts.authentication.ApiKeyAuthentication"
    name = "apiKey"
    priority = -1

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "tdm_<prefix>_<secret>"}

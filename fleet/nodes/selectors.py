"""Read queries of the node registry. Lists select their relations, so a page of nodes
costs the same few queries whatever its length."""

from __future__ import annotations

from django.db.models import QuerySet

from fleet.accounts.secrets import digest, same, split_prefix
from fleet.nodes.choices import NodeState
from fleet.nodes.models import HardwareProfile, Node, NodeToken


def node_queryset() -> QuerySet[Node]:
    return Node.objects.select_related("profile")


def node_list(
    *,
    states: list[str] | None = None,
    role: str | None = None,
    kind: str | None = None,
    labels: list[tuple[str, str]] | None = None,
    simulated: bool | None = None,
    search: str | None = None,
) -> QuerySet[Node]:
    """Nodes filtered the same way for pages and the API's filterset."""
    qs = node_queryset()
    if states:
        qs = qs.filter(state__in=states)
    if role:
        qs = qs.with_role(role)
    if kind:
        qs = qs.filter(profile__kind=kind)
    for key, value in labels or []:
        qs = qs.with_label(key, value)
    if simulated is not None:
        qs = qs.filter(simulated=simulated)
    if search:
        qs = qs.filter(name__icontains=search)
    return qs


def node_get(*, pk: int) -> Node:
    return node_queryset().get(pk=pk)


def node_tokens(*, node: Node) -> QuerySet[NodeToken]:
    return NodeToken.objects.filter(node=node).order_by("-created")


def profile_list() -> QuerySet[HardwareProfile]:
    return HardwareProfile.objects.all()


def node_for_token(plain: str) -> Node | None:
    """The (not retired) node owning an active token `tdn_<prefix>_<secret>`, or None."""
    prefix = split_prefix(plain, "tdn")
    if prefix is None:
        return None
    token = NodeToken.objects.select_related("node__profile").filter(prefix=prefix).first()
    if token is None or token.revoked_at is not None or not same(digest(plain), token.token_hash):
        return None
    if token.node.state == NodeState.RETIRED:
        return None
    return token.node

"""Every state change of the node registry: keyword-only, atomic, side effects after commit.

Concurrency: a service locks the node row (`select_for_update`; on SQLite the IMMEDIATE
transaction mode serialises writers) and checks the caller's `expected_version` against
the locked row, so two edits of one read never both win.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from fleet.accounts.secrets import new_secret
from fleet.audit.services import audit
from fleet.nodes import notices
from fleet.nodes.choices import WATCHED_STATES, NodeState
from fleet.nodes.models import (
    HardwareProfile,
    IllegalTransition,
    Node,
    NodeConflict,
    NodeToken,
)
from fleet.nodes.signals import node_leaving
from fleet.nodes.validators import normalize_roles

logger = logging.getLogger(__name__)

# Fields an admin may edit (PATCH / forms). State goes through the transition services;
# last_seen, agent_version and device_info come from the agent's heartbeats.
EDITABLE_FIELDS = frozenset({"name", "profile", "roles", "labels", "address", "simulated"})


def _after_commit(event: str, node_ids: list[int]) -> None:
    """Logs a registry change once its transaction commits. Draining and returning a node
    change what its pipeline may route to: they go through `fleet.pipelines.node_actions`
    (`node_drain`, `node_return`), which audit, check and push; this registry only keeps
    `node_transition` for them."""
    transaction.on_commit(lambda: _notify(event, node_ids))


def _notify(event: str, node_ids: list[int]) -> None:
    logger.info("nodes: %s %s", event, node_ids)
    notices.post(node_ids)  # the fleet view shows it on the aggregators' next tick


def registry_changed_after_commit(node_ids: list[int]) -> None:
    """For changes made outside this registry that the fleet view shows (a node moved to
    another pipeline, placed, unplaced): the aggregators reload these nodes after commit."""
    _after_commit("placement changed", node_ids)


def _locked(node: Node) -> Node:
    return Node.objects.select_for_update(of=("self",)).select_related("profile").get(pk=node.pk)


def _save(node: Node) -> Node:
    node.full_clean()
    try:
        with transaction.atomic():
            node.save()
    except IntegrityError as exc:  # a concurrent registration took the name first
        raise ValidationError({"name": ["A node with this name already exists."]}) from exc
    return node


def _normalized(roles):
    """Sorted unique roles when valid; invalid ones are left for full_clean() to report
    against the `roles` field."""
    try:
        return normalize_roles(roles)
    except ValidationError:
        return roles


def _issue_token(node: Node) -> str:
    plain, prefix, token_hash = new_secret("tdn")
    NodeToken.objects.create(node=node, prefix=prefix, token_hash=token_hash)
    return plain


@transaction.atomic
def node_register(
    *,
    name: str,
    profile: HardwareProfile,
    roles: list[str],
    labels: dict[str, str] | None = None,
    address: str = "",
    simulated: bool = False,
) -> tuple[Node, str]:
    """Registers a node and issues its first token; returns the node and the plain token,
    which is stored only as a hash and never shown again."""
    node = Node(
        name=name,
        profile=profile,
        roles=_normalized(roles),
        labels=labels or {},
        address=address,
        simulated=simulated,
    )
    _save(node)
    plain = _issue_token(node)
    _after_commit("registered", [node.pk])
    return node, plain


@transaction.atomic
def node_update(*, node: Node, expected_version: int | None = None, **changes) -> Node:
    unknown = set(changes) - EDITABLE_FIELDS
    if unknown:
        raise ValueError(f"not editable: {sorted(unknown)}")
    node = _locked(node)
    node.check_version(expected_version)
    if "roles" in changes:
        changes["roles"] = _normalized(changes["roles"])
    changed = {k: v for k, v in changes.items() if getattr(node, k) != v}
    if changed:
        for field, value in changed.items():
            setattr(node, field, value)
        node.version += 1
        _save(node)
        _after_commit("updated", [node.pk])
    return node


@transaction.atomic
def node_transition(
    *,
    node: Node,
    to: str,
    only_from: frozenset[str] | None = None,
    expected_version: int | None = None,
) -> Node:
    """Moves a node to state `to` if the transition table allows it (and, for actions
    narrower than the table, if it is in one of `only_from`); IllegalTransition otherwise.
    Retiring also revokes the node's tokens."""
    node = _locked(node)
    node.check_version(expected_version)
    if only_from is not None and node.state not in only_from:
        allowed = " or ".join(sorted(only_from))
        raise IllegalTransition(node, to, reason=f"only a {allowed} node can do this")
    node.transition(to)
    node.save(update_fields=["state", "version", "updated"])
    if to == NodeState.RETIRED:
        _revoke_tokens(node)
    _after_commit(to, [node.pk])
    return node


@transaction.atomic
def node_retire(
    *, node: Node, actor=None, expected_version: int | None = None, force: bool = False
) -> Node:
    """Soft delete: the row stays (history refers to it), its tokens are revoked. Audited.
    Refused (409) while it is a pipeline's last healthy drafter or verifier, unless `force`."""
    node_leaving.send(sender=Node, node=node, force=force)
    before = node.state
    node = node_transition(node=node, to=NodeState.RETIRED, expected_version=expected_version)
    audit(
        actor=actor,
        action="node.retire",
        node=node,
        before={"state": before},
        after={"state": node.state},
    )
    return node


def _revoke_tokens(node: Node) -> int:
    from fleet.nodes.redis_acl import sync_node_quietly

    node_id = node.pk  # its Redis user loses the revoked tokens' passwords
    transaction.on_commit(lambda: sync_node_quietly(node_id))
    return NodeToken.objects.filter(node=node, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )


@transaction.atomic
def node_token_revoke(*, node: Node, actor=None, force: bool = False) -> int:
    """Revokes every active token of the node; returns how many. Audited. Refused (409)
    while it is a pipeline's last healthy drafter or verifier (it could no longer serve),
    unless `force`. (Rotation is not refused: the node gets its new token at once.)"""
    node_leaving.send(sender=Node, node=node, force=force)
    count = _revoke_tokens(node)
    audit(actor=actor, action="node.tokens_revoke", node=node, after={"revoked": count})
    _after_commit("tokens-revoked", [node.pk])
    return count


@transaction.atomic
def node_token_rotate(*, node: Node, actor=None) -> tuple[NodeToken, str]:
    """Revokes the node's tokens and issues a new one (returned once, in plain). Audited
    (the new token's prefix, never the token)."""
    node = _locked(node)
    if node.state == NodeState.RETIRED:
        raise NodeConflict(f"Node {node.name!r} is retired: it gets no new tokens.")
    _revoke_tokens(node)
    plain = _issue_token(node)
    token = NodeToken.objects.get(node=node, revoked_at__isnull=True)
    audit(actor=actor, action="node.token_rotate", node=node, after={"token": token.prefix})
    _after_commit("token-rotated", [node.pk])
    return token, plain


@transaction.atomic
def node_heartbeat(
    *,
    node: Node,
    agent_version: str | None = None,
    device_info: dict | None = None,
    address: str | None = None,
    now: datetime | None = None,
) -> Node:
    """A heartbeat from the node's agent. The first one registers the agent (its version,
    device and address); registered and lost nodes come online, draining ones stay
    draining. Liveness fields do not bump the version; a state change does."""
    now = now or timezone.now()
    node = _locked(node)
    node.last_seen = now
    fields = ["last_seen", "updated"]
    for field, value in (
        ("agent_version", agent_version),
        ("device_info", device_info),
        ("address", address),
    ):
        if value is not None and getattr(node, field) != value:
            setattr(node, field, value)
            fields.append(field)
    if node.state in (NodeState.REGISTERED, NodeState.LOST):
        node.transition(NodeState.ONLINE)
        fields += ["state", "version"]
        _after_commit(NodeState.ONLINE, [node.pk])
    node.save(update_fields=fields)
    return node


@transaction.atomic
def nodes_mark_lost(*, now: datetime | None = None) -> list[int]:
    """Turns watched (online/draining) nodes whose heartbeat aged out into lost. One
    conditional UPDATE, so a heartbeat racing with it either wins or is seen."""
    now = now or timezone.now()
    cutoff = now - Node.liveness_window()
    stale = Node.objects.filter(state__in=WATCHED_STATES, last_seen__lt=cutoff)
    ids = list(stale.select_for_update(skip_locked=True).values_list("pk", flat=True))
    if not ids:
        return []
    Node.objects.filter(pk__in=ids, state__in=WATCHED_STATES, last_seen__lt=cutoff).update(
        state=NodeState.LOST, version=F("version") + 1, updated=now
    )
    _after_commit(NodeState.LOST, ids)
    return ids


@transaction.atomic
def node_mark_lost(*, node: Node) -> Node:
    """The node's worker process is known to be gone (the supervisor that ran it saw it
    exit): lost now, without waiting for its heartbeats to age out. Only a watched node
    (online/draining) changes; its next heartbeat brings it back online as usual."""
    node = _locked(node)
    if node.state in WATCHED_STATES:
        node.transition(NodeState.LOST)
        node.save(update_fields=["state", "version", "updated"])
        _after_commit(NodeState.LOST, [node.pk])
    return node


@transaction.atomic
def profile_create(**fields) -> HardwareProfile:
    profile = HardwareProfile(**fields)
    profile.full_clean()
    profile.save()
    return profile


@transaction.atomic
def profile_update(*, profile: HardwareProfile, **fields) -> HardwareProfile:
    for field, value in fields.items():
        setattr(profile, field, value)
    profile.full_clean()
    profile.save()
    return profile

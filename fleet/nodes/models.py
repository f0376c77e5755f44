"""The node registry: hardware profiles, nodes and their tokens. A node's figures are not
here: they arrive as signed samples and live in the telemetry app (its live snapshot and
rollups)."""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import combinations

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models.constants import LOOKUP_SEP
from django.utils import timezone

from fleet.nodes.choices import (
    TERMINAL_STATES,
    NodeRole,
    NodeState,
    ProfileKind,
    can_transition,
)
from fleet.nodes.validators import (
    normalize_roles,
    validate_device_info,
    validate_labels,
    validate_node_name,
    validate_roles,
)

_non_negative = [MinValueValidator(0)]
# The roofline divides by these: zero would be a device that moves no bytes, computes nothing.
_positive = [MinValueValidator(1e-6, message="must be greater than 0")]


class NodeConflict(Exception):
    """The node is in a state or version that does not allow this (the API answers 409
    with the message as the reason)."""

    code = "conflict"


class IllegalTransition(NodeConflict):
    """A state change the transition table (or the action) does not allow."""

    code = "illegal_transition"

    def __init__(self, node: Node, to: str, *, reason: str = ""):
        self.current, self.to = str(node.state), str(to)
        if not reason and node.state in TERMINAL_STATES:
            reason = "retired is final"
        super().__init__(
            f"Node {node.name!r} cannot go from {self.current!r} to {self.to!r}"
            + (f" ({reason})." if reason else ".")
        )


class StaleVersion(NodeConflict):
    """The node changed since the client read it."""

    code = "stale_version"

    def __init__(self, node: Node, expected: int):
        self.current, self.expected = node.version, expected
        super().__init__(
            f"Node {node.name!r} is at version {node.version}, not {expected}: "
            "it changed since you read it. Reload and try again."
        )


class HardwareProfile(models.Model):
    """A device type with the figures the planner needs. Seeded by a data migration;
    `sources` maps a figure's field name to where the figure comes from."""

    slug = models.SlugField(max_length=64, unique=True)
    kind = models.CharField(max_length=24, choices=ProfileKind.choices)
    vendor = models.CharField(max_length=64)
    model = models.CharField(max_length=128)
    memory_gb = models.FloatField(validators=_non_negative, help_text="Fast memory (HBM/SRAM/DRAM)")
    memory_bandwidth_gbs = models.FloatField(validators=_positive)
    peak_bf16_tflops = models.FloatField(validators=_positive, help_text="Dense, no sparsity")
    tdp_w = models.FloatField(validators=_non_negative)
    idle_w = models.FloatField(validators=_non_negative)
    list_price_usd = models.FloatField(null=True, blank=True, validators=_non_negative)
    usd_per_hour = models.FloatField(null=True, blank=True, validators=_non_negative)
    sources = models.JSONField(default=dict, blank=True)
    notes = models.TextField(blank=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return f"{self.vendor} {self.model}"


class NodeQuerySet(models.QuerySet):
    def with_role(self, role: str):
        """Nodes that can take `role`. Roles are stored normalized (sorted, unique), so the
        stored lists containing a role are few and known: an exact match on each works on
        SQLite and PostgreSQL alike (JSON `contains` does not exist on SQLite)."""
        combos = _role_combinations_with(role)
        query = models.Q(pk__in=[])
        for combo in combos:
            query |= models.Q(roles=combo)
        return self.filter(query)

    def with_label(self, key: str, value: str):
        """Nodes whose label `key` equals `value` (chainable for several labels)."""
        if LOOKUP_SEP in key:  # never a valid label key; would be read as a lookup path
            return self.none()
        return self.filter(**{f"labels__{key}": value})

    def not_retired(self):
        return self.exclude(state=NodeState.RETIRED)


def _role_combinations_with(role: str) -> list[list[str]]:
    roles = sorted(NodeRole.values)
    return [list(c) for n in range(1, len(roles) + 1) for c in combinations(roles, n) if role in c]


class Node(models.Model):
    name = models.CharField(max_length=63, unique=True, validators=[validate_node_name])
    profile = models.ForeignKey(HardwareProfile, on_delete=models.PROTECT, related_name="nodes")
    roles = models.JSONField(default=list, validators=[validate_roles])
    state = models.CharField(
        max_length=16, choices=NodeState.choices, default=NodeState.REGISTERED, db_index=True
    )
    labels = models.JSONField(default=dict, blank=True, validators=[validate_labels])
    address = models.CharField(max_length=255, blank=True)
    agent_version = models.CharField(max_length=64, blank=True)
    device_info = models.JSONField(default=dict, blank=True, validators=[validate_device_info])
    last_seen = models.DateTimeField(null=True, blank=True, db_index=True)
    simulated = models.BooleanField(default=False)
    # Bumped on every change an operator can see or make (fields, state), not on plain
    # liveness updates, so an edit form is not invalidated by each heartbeat.
    version = models.PositiveIntegerField(default=1)
    # indexed: the node list pages by cursor in these orders too (fleet/nodes/pagination.py)
    created = models.DateTimeField(default=timezone.now, db_index=True)
    updated = models.DateTimeField(auto_now=True, db_index=True)

    objects = NodeQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if isinstance(self.roles, list) and self.roles:
            try:
                self.roles = normalize_roles(self.roles)
            except Exception:  # reported by the field validator
                pass

    def can_transition(self, to: str) -> bool:
        return can_transition(self.state, to)

    def transition(self, to: str) -> None:
        """Move to state `to` in memory (and bump the version), or raise IllegalTransition.
        Services persist it under a row lock: use `node_drain()` and friends, not this."""
        if not self.can_transition(to):
            raise IllegalTransition(self, to)
        self.state = to
        self.version += 1

    def check_version(self, expected: int | None) -> None:
        if expected is not None and expected != self.version:
            raise StaleVersion(self, expected)

    @staticmethod
    def liveness_window() -> timedelta:
        return timedelta(seconds=settings.HEARTBEAT_PERIOD_S * settings.HEARTBEAT_TOLERANCE)

    def is_lost(self, now: datetime | None = None) -> bool:
        """Has the last heartbeat aged past period x tolerance? A node that never sent one
        is not lost (it has not started yet); a retired node is never lost."""
        if self.last_seen is None or self.state in TERMINAL_STATES:
            return False
        return self.last_seen < (now or timezone.now()) - self.liveness_window()


class NodeToken(models.Model):
    """A node agent's bearer secret `tdn_<prefix>_<secret>`, stored as SHA-256."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="tokens")
    prefix = models.CharField(max_length=16, unique=True)
    token_hash = models.CharField(max_length=64, unique=True)
    created = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.node_id}:{self.prefix}…"

    @property
    def active(self) -> bool:
        return self.revoked_at is None

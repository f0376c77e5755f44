"""States, roles and kinds of the node registry, and the one table of legal transitions."""

from __future__ import annotations

from django.db import models


class ProfileKind(models.TextChoices):
    GPU = "gpu", "GPU"
    SRAM_ACCELERATOR = "sram-accelerator", "SRAM accelerator"
    CPU = "cpu", "CPU"


class NodeRole(models.TextChoices):
    DRAFT = "draft", "Draft"
    VERIFY = "verify", "Verify"


class NodeState(models.TextChoices):
    REGISTERED = "registered", "Registered"
    ONLINE = "online", "Online"
    DRAINING = "draining", "Draining"
    LOST = "lost", "Lost"
    RETIRED = "retired", "Retired"


class PowerSource(models.TextChoices):
    MEASURED_NVML = "measured-nvml", "Measured (NVML)"
    MEASURED_RAPL = "measured-rapl", "Measured (RAPL)"
    MODELED = "modeled", "Modeled from the hardware profile"


S = NodeState

# The legal moves, in one place. Everything that changes a node's state goes through
# `Node.transition()`, which consults this table.
TRANSITIONS: dict[str, frozenset[str]] = {
    S.REGISTERED: frozenset({S.ONLINE, S.DRAINING, S.RETIRED}),
    S.ONLINE: frozenset({S.DRAINING, S.LOST, S.RETIRED}),
    S.DRAINING: frozenset({S.ONLINE, S.LOST, S.RETIRED}),
    S.LOST: frozenset({S.ONLINE, S.DRAINING, S.RETIRED}),
    S.RETIRED: frozenset(),
}
TERMINAL_STATES = frozenset({S.RETIRED})
# States whose liveness is watched: a missed heartbeat turns them lost.
WATCHED_STATES = frozenset({S.ONLINE, S.DRAINING})
# States a node may take new work in (the router's view).
SERVING_STATES = frozenset({S.ONLINE})


def can_transition(current: str, to: str) -> bool:
    return to in TRANSITIONS.get(current, frozenset())

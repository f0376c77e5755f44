"""What the pipelines app tells whoever listens, without importing them (the walls: nodes,
pipelines and accounts never reach up to telemetry or the console)."""

from django.dispatch import Signal

# Sent after commit for each AuditEvent about a pipeline or a node, with `event`: the live
# pages' sockets show its chart marker at once (fleet.telemetry.changes).
change_committed = Signal()

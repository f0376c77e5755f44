"""What the audit log tells whoever listens, without importing them (the walls: accounts,
nodes and pipelines never reach up to telemetry, the planner or the console)."""

from django.dispatch import Signal

# Sent after commit for each AuditEvent about a pipeline or a node, with `event`: the live
# pages' sockets show its chart marker at once (fleet.telemetry.changes), the planner checks
# an applied change (fleet.planner.verification).
change_committed = Signal()

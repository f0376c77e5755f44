"""What the pipelines app tells whoever listens, without importing them (the walls: nodes,
pipelines and accounts never reach up to telemetry, the console or the data plane). Its
audit events' signal is `fleet.audit.signals.change_committed`."""

from django.dispatch import Signal

# Sent when a committed configuration change is delivered from the outbox (`outbox.deliver`),
# with `pipeline` (the row as it is now) and `node_ids` (None: every placed node). The data
# plane's receiver (`inference.receivers`) pushes it to the workers. Sent with `send`, not
# `send_robust`: a receiver that raises (Redis away: RedisError, OSError) leaves the push in
# the outbox, retried until delivered.
config_committed = Signal()

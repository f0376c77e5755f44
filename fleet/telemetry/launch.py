"""The aggregators as children of `manage.py up` (see fleet/runtime/launcher.py CHILD_FACTORIES):
TANDEM_AGGREGATORS processes (default 1; they split the telemetry shards between them)."""

from __future__ import annotations

import sys

from fleet.env import env_int
from fleet.runtime.children import ChildSpec

MAX_AGGREGATORS = 16  # one per shard at most (fleet.telemetry.ingest.SHARDS)


def aggregator_count() -> int:
    """TANDEM_AGGREGATORS, 1..16; a bad value stops the start with the variable's name."""
    from django.core.exceptions import ImproperlyConfigured

    count = env_int("TANDEM_AGGREGATORS", 1, minimum=1)
    if count > MAX_AGGREGATORS:
        raise ImproperlyConfigured(
            f"TANDEM_AGGREGATORS must be <= {MAX_AGGREGATORS} (one per shard), got {count}"
        )
    return count


def aggregator_children(settings) -> list[ChildSpec]:
    count = aggregator_count()
    return [
        ChildSpec(
            name="telemetry" if count == 1 else f"telemetry-{i + 1}",
            argv=[sys.executable, str(settings.BASE_DIR / "manage.py"), "run_aggregator"],
            stop_timeout_s=5.0,
        )
        for i in range(count)
    ]

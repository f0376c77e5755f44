"""What every rule module returns: one Alert per condition found true."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Alert:
    """A condition true now. `hold_s` is the part of the rule's `for:` (alerts.yml) that Tandem's
    own data cannot show already held: `alert_state.sync` keeps the condition pending for that
    long before it fires. 0 when the rule reads its `for:` from history (rollups, a tick's age)
    or has none."""

    key: str
    name: str
    severity: str
    summary: str
    pipeline_id: int | None = None
    node_id: int | None = None
    hold_s: int = 0

"""The ledger consumer as a child of `manage.py up` (see fleet/launcher.py CHILD_FACTORIES)."""

from __future__ import annotations

import sys

from fleet.launcher import ChildSpec


def ledger_children(settings) -> list[ChildSpec]:
    return [
        ChildSpec(
            name="ledger",
            argv=[sys.executable, str(settings.BASE_DIR / "manage.py"), "run_ledger"],
            stop_timeout_s=5.0,
        )
    ]

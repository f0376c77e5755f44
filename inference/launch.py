"""The ledger consumer as a child of `manage.py up` (see fleet/runtime/children.py
CHILD_FACTORIES)."""

from __future__ import annotations

import sys

from fleet.runtime.children import ChildSpec


def ledger_children(settings) -> list[ChildSpec]:
    return [
        ChildSpec(
            name="ledger",
            argv=[sys.executable, str(settings.BASE_DIR / "manage.py"), "run_ledger"],
            stop_timeout_s=5.0,
        )
    ]

"""The small simulated fleet as a child of `manage.py up` (see fleet/runtime/launcher.py
CHILD_FACTORIES), so the console shows a living fleet from the first minute.

TANDEM_SIMULATOR=0 turns it off; TANDEM_SIMULATOR_NODES / TANDEM_SIMULATOR_PIPELINES size it.
Its nodes and pipelines are named `demo-...` and marked simulated.
"""

from __future__ import annotations

import sys

from fleet.env import env_bool, env_int
from fleet.runtime.children import ChildSpec


def simulator_children(settings) -> list[ChildSpec]:
    if not env_bool("TANDEM_SIMULATOR", True):
        return []
    nodes = str(env_int("TANDEM_SIMULATOR_NODES", 24, minimum=1))
    pipelines = str(env_int("TANDEM_SIMULATOR_PIPELINES", 3, minimum=1))
    return [
        ChildSpec(
            name="sim",
            argv=[
                sys.executable,
                str(settings.BASE_DIR / "manage.py"),
                "simulate",
                "--nodes",
                nodes,
                "--pipelines",
                pipelines,
                "--prefix",
                "demo",
            ],
            stop_timeout_s=5.0,
        )
    ]

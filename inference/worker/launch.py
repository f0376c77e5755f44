"""`manage.py up` children: one drafter and one verifier worker of the demo pipeline on
this machine (`run_node --demo` trains the demo pair first if it is missing)."""

from __future__ import annotations

import sys

from fleet.launcher import ChildSpec
from inference.worker.demo import NODE_NAMES


def node_children(settings) -> list[ChildSpec]:
    return [
        ChildSpec(
            name=f"node-{role}",
            argv=[
                sys.executable,
                str(settings.BASE_DIR / "manage.py"),
                "run_node",
                "--role",
                role,
                "--demo",
                "--loglevel",
                "WARNING",
            ],  # fmt: skip
            env={"OMP_NUM_THREADS": "1"},
            stop_timeout_s=10.0,
            node=NODE_NAMES[role],  # lost at once if this worker dies (fleet/launcher.py)
        )
        for role in ("verify", "draft")
    ]

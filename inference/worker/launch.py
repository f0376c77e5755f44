"""`manage.py up` children: a drafter and a verifier worker for each of this machine's
pipelines (TANDEM_DEFAULT_PIPELINES; `run_node --local NAME` prepares the pipeline's models
first if they are missing: see `inference.worker.local`)."""

from __future__ import annotations

import sys

from fleet.env import env_is_set
from fleet.launcher import ChildSpec
from inference.worker.local import PIPELINES, default_pipelines, node_name


def _unset(defaults: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in defaults.items() if not env_is_set(k)}


def node_children(settings) -> list[ChildSpec]:
    return [
        ChildSpec(
            name=f"node-{name}-{role}",
            argv=[
                sys.executable,
                str(settings.BASE_DIR / "manage.py"),
                "run_node",
                "--role",
                role,
                "--local",
                name,
                "--loglevel",
                "WARNING",
            ],
            env={"OMP_NUM_THREADS": "1"} | _unset(PIPELINES[name].worker_env),
            stop_timeout_s=10.0,
            node=node_name(name, role),  # lost at once if this worker dies (fleet/launcher.py)
        )
        for name in default_pipelines()
        for role in ("verify", "draft")
    ]

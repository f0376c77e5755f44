"""`manage.py up` children: a drafter and a verifier worker for each of this machine's
pipelines (TANDEM_DEFAULT_PIPELINES; `run_node --local NAME` prepares the pipeline's models
first if they are missing: see `inference.worker.local`), and a one-shot job training the
learned draft of those that have one (TANDEM_LEARNED_DRAFTS=0: none)."""

from __future__ import annotations

import sys

from fleet.env import env_bool, env_is_set
from fleet.runtime.children import ChildSpec
from inference.local_pipelines import PIPELINES, default_pipelines, node_name


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
            node=node_name(
                name, role
            ),  # lost at once if this worker dies (fleet/runtime/launcher.py)
        )
        for name in default_pipelines()
        for role in ("verify", "draft")
    ]


TARGET_WAIT_S = 1800  # the node workers convert the target's weights first


def train_children(settings) -> list[ChildSpec]:
    """`train_draft --serve` for each local pipeline with a learned draft: it trains once
    (a no-op when the draft exists), at a lower priority, while the pipeline serves with
    its n-gram drafter, then swaps the pipeline's draft through the audited service."""
    if not env_bool("TANDEM_LEARNED_DRAFTS", True):
        return []
    return [
        ChildSpec(
            name=f"train-{name}",
            argv=[
                sys.executable,
                str(settings.BASE_DIR / "manage.py"),
                "train_draft",
                "--target",
                name,
                "--serve",
                "--minutes",
                f"{spec.learned_draft_minutes:g}",
                "--wait-for-target",
                str(TARGET_WAIT_S),
                "--nice",
                "10",
            ],
            stop_timeout_s=5.0,
            oneshot=True,
        )
        for name in default_pipelines()
        if (spec := PIPELINES[name]).learned_draft_minutes
    ]
